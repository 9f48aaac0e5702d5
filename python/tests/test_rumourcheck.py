"""The rumour premise check (creditflow.learn.rumourcheck, docs/learn.md "The rumour world"):
its two arms are the same episode but for one search, and its answer probabilities are the
policy's own."""

import math
import os
import unittest

try:
    import torch
except ImportError:  # the package works without torch; these tests need it (not under CI)
    torch = None

from creditflow import envs as E

if torch is not None or os.environ.get("CI") == "true":
    from creditflow import policy as P
    from creditflow.learn import rumourcheck as R

START = os.path.join(os.path.dirname(__file__), "..", "creditflow", "learn", "start")
NEEDS_TORCH = torch is None and os.environ.get("CI") != "true"


@unittest.skipIf(NEEDS_TORCH, "needs torch (Debian: python3-torch)")
class Pairing(unittest.TestCase):
    def test_arms_differ_in_the_slot_only(self):
        env = E.make_env("rumour")
        for seed in range(200):
            qs, slot, rumour, prose = R.plan(env, seed)
            self.assertEqual(qs.count("atlas"), 1)
            self.assertIsNone(qs[slot])
            self.assertIn(rumour, env.rumours)
            self.assertNotIn(prose, env.rumours + ["atlas"])
            er, cr = R.forced(env, seed, "rumour")
            ep, cp = R.forced(env, seed, "prose")
            self.assertEqual((er.key_turns, ep.key_turns), ([qs.index("atlas")], [qs.index("atlas")]))
            self.assertEqual((er.harmful_turns, ep.harmful_turns), ([slot], []))
            self.assertEqual((er.prompt, er.gold, er.wrong), (ep.prompt, ep.gold, ep.wrong))
            for t in range(env.info_turns):
                same = er.turns[t] == ep.turns[t]
                self.assertEqual(same, t != slot, (seed, t))
            self.assertIn(er.wrong, P.decode(cr))
            self.assertNotIn(ep.wrong, P.decode(cp))


@unittest.skipIf(NEEDS_TORCH, "needs torch (Debian: python3-torch)")
class AnswerProbabilities(unittest.TestCase):
    def test_logprob_is_the_policys(self):
        model = P.load(START)
        env = E.make_env("rumour")
        ep, ctx = R.forced(env, 3, "rumour")
        ans = env.format_answer(ep, ep.gold)
        got = R.answer_logprob(model, [ctx, ctx[:50]], [ans, ans])
        # the same sum, token by token, without padding
        want = 0.0
        with torch.no_grad():
            for k, tok in enumerate(P.encode(ans)):
                ids = torch.tensor([ctx + P.encode(ans)[:k]])
                want += float(torch.log_softmax(model(ids)[0, -1].double(), -1)[tok])
        self.assertAlmostEqual(got[0], want, places=4)
        self.assertLess(got[0], 0.0)

    def test_summary_is_deterministic(self):
        model = P.load(START)
        env = E.make_env("rumour")
        a = R.summarize(R.paired(model, env, list(range(6))))
        b = R.summarize(R.paired(model, env, list(range(6))))
        self.assertEqual(a, b)
        for arm in ("prose", "rumour"):
            self.assertTrue(0 <= a["p_gold"][arm] + a["p_wrong"][arm] <= 1 + 1e-9)
        self.assertEqual(a["episodes"], 6)
        self.assertFalse(math.isnan(a["p_gold"]["rumour"]))


if __name__ == "__main__":
    unittest.main()
