"""The interactive worlds' ground truth (creditflow.envs): the right query (place) and only it
reveals the evidence, the reward is 1 exactly for the gold answer, episodes are deterministic in
their seed, and a policy that picks at random succeeds in the minority the design promises."""

import random
import unittest

from creditflow import envs as E


def play(env, seed, chooser, answer=None):
    ep = env.reset(seed)
    while env.phase(ep) == "info":
        env.step(ep, chooser(ep))
    env.step(ep, answer(ep) if answer else env.format_answer(ep, ep.gold if ep.key_turns else "NOBODY"))
    return ep


class WorldTruth(unittest.TestCase):
    def worlds(self):
        return [E.make_env("searchqa"), E.make_env("widesearch"), E.make_env("household")]

    def test_only_the_right_query_reveals_the_gold_answer(self):
        for env in self.worlds():
            for seed in range(200):
                for q in env.options:
                    ep = env.reset(seed)
                    obs = env.step(ep, env.format_query(q))
                    self.assertEqual(ep.gold in obs, q == ep.right, (env.name, seed, q, obs))
                    self.assertEqual(ep.key_turns, [0] if q == ep.right else [])

    def test_malformed_actions_reveal_nothing(self):
        for env in self.worlds():
            ep = env.reset(3)
            for bad in ["", "search", "<search>lisbon", "open", "open the moon\n", "<answer>x</answer>"]:
                if env.phase(ep) != "info":
                    break
                obs = env.step(ep, bad)
                self.assertNotIn(ep.gold, obs)
            self.assertEqual(ep.key_turns, [])

    def test_reward_is_one_exactly_for_the_gold_answer(self):
        for env in self.worlds():
            for seed in range(50):
                ep = play(env, seed, lambda e: env.format_query(e.right), lambda e: env.format_answer(e, e.gold))
                self.assertEqual(ep.reward, 1.0)
                self.assertTrue(ep.done)
                ep = play(env, seed, lambda e: env.format_query(e.right),
                          lambda e: env.format_answer(e, E.NAMES[(E.NAMES.index(e.gold) + 1) % len(E.NAMES)]))
                self.assertEqual(ep.reward, 0.0)

    def test_episodes_are_deterministic_in_their_seed(self):
        for env in self.worlds():
            a = play(env, 11, lambda e: env.format_query(env.options[0]))
            b = play(env, 11, lambda e: env.format_query(env.options[0]))
            self.assertEqual(a.turns, b.turns)
            self.assertEqual((a.prompt, a.gold, a.right), (b.prompt, b.gold, b.right))

    def test_gold_answer_nowhere_but_in_the_evidence(self):
        for env in self.worlds():
            for seed in range(100):
                ep = env.reset(seed)
                self.assertNotIn(ep.gold, ep.prompt)
                self.assertEqual(ep.gold.upper(), ep.gold)
                self.assertEqual(ep.prompt.lower(), ep.prompt)

    def test_a_random_policy_succeeds_in_a_minority(self):
        # P(found) = 1 - (1 - 1/k)^n for n information turns among k options
        for env in self.worlds():
            rng = random.Random(5)
            n = 4000
            wins = sum(play(env, s, lambda e: env.format_query(rng.choice(env.options))).reward for s in range(n)) / n
            k, turns = len(env.options), env.info_turns
            want = 1 - (1 - 1 / k) ** turns
            self.assertAlmostEqual(wins, want, delta=0.03, msg=env.name)
            self.assertLess(wins, 0.5)

    def test_the_evidence_names_the_question_subject(self):
        env = E.make_env("searchqa")
        for seed in range(100):
            ep = env.reset(seed)
            obs = env.step(ep, env.format_query(ep.right))
            self.assertIn("%s is also called %s." % (ep.subject, ep.gold), obs)
            self.assertIn(ep.subject, ep.prompt)

    def test_the_judge_errs_at_its_rate_and_never_changes_the_truth(self):
        env = E.make_env("widesearch")
        rng = random.Random(9)
        n, q = 4000, 0.3
        wrong = right_judged = 0
        for s in range(n):
            ep = play(env, s // 5, lambda e: env.format_query(rng.choice(env.options)))
            truth = (ep.correct, ep.reward)
            r = E.judge(ep, q, "run-g%06d-%d" % (s // 5, s % 5))
            self.assertEqual((ep.correct, ep.reward), truth)  # the judge returns its verdict, changes nothing
            self.assertEqual(ep.reward, 1.0 if ep.correct else 0.0)
            self.assertIn(r, (0.0, 1.0))
            wrong += r != ep.reward
            right_judged += ep.correct and r == 1.0
            self.assertEqual(r, E.judge(ep, q, "run-g%06d-%d" % (s // 5, s % 5)))  # deterministic in its key
            self.assertEqual(E.judge(ep, 0.0, "any"), ep.reward)
        self.assertAlmostEqual(wrong / n, q, delta=0.025)
        self.assertGreater(right_judged, 0)
        # members of one group (one seed) get independent verdicts
        ep = play(env, 1, lambda e: env.format_query(e.right), lambda e: env.format_answer(e, e.gold))
        verdicts = {E.judge(ep, q, "g-%d" % i) for i in range(50)}
        self.assertEqual(verdicts, {0.0, 1.0})
        for bad in (-0.1, 0.5, 1.0):
            with self.assertRaises(ValueError):
                E.judge(ep, bad, "k")
        with self.assertRaises(ValueError):
            E.judge(env.reset(2), 0.1, "k")  # not over yet


if __name__ == "__main__":
    unittest.main()
