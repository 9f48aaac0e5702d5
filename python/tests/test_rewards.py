"""The noisy-judge controls' rewards and the label-noise arm's gold (creditflow.learn.rewards)."""

import math
import os
import unittest

import torch

from creditflow import envs as E
from creditflow import policy as P
from creditflow.learn import rewards as R
from creditflow.learn import rollout
from creditflow.trajectory import DEFAULT_TEMPLATE

START = os.path.join(os.path.dirname(R.__file__), "start-widesearch")


class Likelihood(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rollout.setup_torch()
        cls.env = E.make_env("widesearch")
        cls.model = P.load(START)
        g = torch.Generator().manual_seed(7)
        cls.played = rollout.play(cls.model, cls.env, list(range(500, 540)), temperature=1.0, generator=g)

    def test_equals_the_text_computed_by_hand(self):
        # The pre-answer context as text, the template after it, and the gold's bytes scored one
        # by one with the model's own softmax: the same number, without the module's indexing.
        for ep, turns in self.played[:6]:
            text = ep.prompt + "".join(a + o for kind, a, o in ep.turns if kind != "answer")
            prefix = DEFAULT_TEMPLATE.split("{gold}")[0]
            ids = P.encode(text + prefix + ep.gold)
            with torch.no_grad():
                logits = self.model(torch.tensor([ids[:-1]]))[0]
            lp = torch.log_softmax(logits.double() / 0.7, -1)
            n = len(ep.gold.encode())
            s = sum(float(lp[len(ids) - 1 - n + k - 0, ids[len(ids) - n + k]]) for k in range(n)) / n
            got = R.gold_likelihood(self.model, ep, turns, temperature=0.7)
            self.assertAlmostEqual(got, math.exp(s), delta=1e-5 * math.exp(s))
            self.assertTrue(0 < got <= 1)

    def test_likelihood_bonus_is_the_verdict_plus_the_scaled_likelihood(self):
        for i, (ep, turns) in enumerate(self.played[:5]):
            key = "s1-g%06d-%d" % (i, 0)
            want = E.judge(ep, 0.3, key) + 0.5 * R.gold_likelihood(self.model, ep, turns)
            got = R.reward_of("likelihood-bonus", ep, turns, key, noise=0.3, bonus=0.5, model=self.model)
            self.assertAlmostEqual(got, want, places=12)

    def test_higher_when_the_evidence_was_seen(self):
        # The start policy copies a name it has seen: the gold's likelihood is higher in episodes
        # whose observations held it (a property of the trained start, not of the code; on 40
        # episodes about 0.99 against 0.67: after a name's first bytes the rest is nearly certain).
        seen = [R.gold_likelihood(self.model, ep, t) for ep, t in self.played if R.gold_in_observation(ep)]
        unseen = [R.gold_likelihood(self.model, ep, t) for ep, t in self.played if not R.gold_in_observation(ep)]
        self.assertTrue(seen and unseen, "40 episodes of the start hold both kinds")
        self.assertGreater(sum(seen) / len(seen), 0.2 + sum(unseen) / len(unseen))

    def test_the_context_stops_before_the_answer(self):
        ep, turns = self.played[0]
        ctx = R.pre_answer_context(ep, turns)
        self.assertEqual(P.decode(ctx), ep.prompt + "".join(a + o for kind, a, o in ep.turns if kind != "answer"))
        self.assertNotIn("<answer>", P.decode(ctx)[len(ep.prompt):])


class JudgeRewards(unittest.TestCase):
    def setUp(self):
        self.env = E.make_env("widesearch")

    def episode(self, seed, found, right):
        ep = self.env.reset(seed)
        while self.env.phase(ep) == "info":
            q = ep.right if (found and not ep.turns) else next(o for o in self.env.options if o != ep.right)
            self.env.step(ep, self.env.format_query(q))
        name = ep.gold if right else next(n for n in E.NAMES if n != ep.gold)
        self.env.step(ep, self.env.format_answer(ep, name))
        return ep

    def test_gold_bonus_is_the_verdict_plus_the_bonus(self):
        for found in (False, True):
            for right in (False, True):
                ep = self.episode(11, found, right)
                self.assertEqual(R.gold_in_observation(ep), found)
                for k in range(20):
                    key = "t-%d" % k
                    want = E.judge(ep, 0.3, key) + (0.25 if found else 0.0)
                    self.assertEqual(R.reward_of("gold-bonus", ep, None, key, noise=0.3, bonus=0.25), want)
        with self.assertRaises(ValueError):
            R.reward_of("luck", ep, None, "k")

    def test_scorer_gold_is_wrong_exactly_where_the_judge_errs(self):
        wrong_right = self.episode(12, True, False), self.episode(13, True, True)
        errs = 0
        for ep in wrong_right:
            for k in range(400):
                key = "s1-g%06d-%d" % (k // 5, k % 5)
                g = R.scorer_gold(ep, 0.3, key)
                self.assertEqual(g, R.scorer_gold(ep, 0.3, key), "deterministic in the key")
                if E.judge_errs(0.3, key):
                    errs += 1
                    self.assertNotEqual(g, ep.gold)
                    self.assertIn(g, E.NAMES)
                    if not ep.correct:  # the judge accepted the wrong answer: that is its gold
                        self.assertEqual(g, ep.answer)
                    # the verdict agrees with the believed gold
                    self.assertEqual(E.judge(ep, 0.3, key), 1.0 if ep.answer == g else 0.0)
                else:
                    self.assertEqual(g, ep.gold)
                self.assertEqual(R.scorer_gold(ep, 0.0, key), ep.gold)
        self.assertTrue(0.25 < errs / 800 < 0.35, errs)

    def test_the_trajectory_carries_the_given_gold(self):
        ep = self.episode(14, True, True)
        turns = [(k, P.encode(a), [0.0] * len(P.encode(a)), P.encode(o)) for k, a, o in ep.turns]
        other = next(n for n in E.NAMES if n != ep.gold)
        t = rollout.to_trajectory(self.env, ep, turns, trajectory_id="x", prompt_id="p", group_size=5, sample_index=0,
                                  policy_version=0, temperature=1.0, gold=other)
        self.assertEqual(t["gold_answers"], [other])
        self.assertIn(other.encode(), bytes(t["gold_target"]))


if __name__ == "__main__":
    unittest.main()
