"""The loop's policy (creditflow.policy): checkpoints round-trip, incremental decoding gives the
log-probabilities of a full forward pass, sampling is deterministic for a seed, and the rollout
log-probabilities are what the trainer's loss recomputes."""

import os
import tempfile
import unittest

try:
    import torch
except ImportError:  # the package works without torch; these tests need it
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "..", "scorer", "cpumodel", "tiny")
START = os.path.join(HERE, "..", "creditflow", "learn", "start")


@unittest.skipIf(torch is None, "needs torch (Debian: python3-torch)")
class PolicyTest(unittest.TestCase):
    def setUp(self):
        from creditflow import policy as P
        torch.set_num_threads(1)
        self.P = P
        self.model = P.load(TINY)

    def test_checkpoint_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            self.P.save(self.model, d, {"tokenizer.json": "{}"})
            again = self.P.load(d)
            for (n, a), (m, b) in zip(sorted(self.model.state_dict().items()), sorted(again.state_dict().items())):
                self.assertEqual(n, m)
                self.assertTrue(torch.equal(a, b), n)
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                first = f.read()
            self.P.save(again, d)
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                self.assertEqual(first, f.read(), "same weights, same bytes")

    def test_cached_sampling_matches_a_full_forward(self):
        P = self.P
        ctx = [P.encode("<|user|> short <|assistant|>"), P.encode("<|user|> a much longer context, with more words <|assistant|>"),
               P.encode("x")]
        for temp in (1.0, 0.7, 0.0):
            out = P.sample_actions(self.model, ctx, ["</a>"] * 3, max_tokens=12, temperature=temp,
                                   generator=torch.Generator().manual_seed(3))
            for c, (ids, lps) in zip(ctx, out):
                self.assertEqual(len(ids), len(lps))
                full = torch.tensor([c + ids])
                ref = P.token_logprobs(self.model, full, temp if temp > 0 else 1.0)[0, len(c) - 1:]
                for a, b in zip(ref.tolist(), lps):
                    self.assertAlmostEqual(a, b, places=4)

    def test_sampling_is_deterministic_for_a_seed(self):
        P = self.P
        ctx = [P.encode("<|user|> hello <|assistant|>")] * 4
        a = P.sample_actions(self.model, ctx, ["\n"] * 4, max_tokens=10, generator=torch.Generator().manual_seed(5))
        b = P.sample_actions(self.model, ctx, ["\n"] * 4, max_tokens=10, generator=torch.Generator().manual_seed(5))
        self.assertEqual(a, b)
        c = P.sample_actions(self.model, ctx, ["\n"] * 4, max_tokens=10, generator=torch.Generator().manual_seed(6))
        self.assertNotEqual(a, c)

    def test_the_starting_policy_writes_well_formed_actions(self):
        from creditflow import envs as E
        from creditflow.learn import rollout
        model = self.P.load(START)
        for name in ("searchqa", "household"):
            env = E.make_env(name)
            played = rollout.play(model, env, list(range(40)), generator=torch.Generator().manual_seed(1))
            queries = [env.parse_query(self.P.decode(t[1])) for _, turns in played for t in turns[:-1]]
            well_formed = sum(q is not None for q in queries) / len(queries)
            self.assertGreater(well_formed, 0.9, name)
            # it picks among the options, not one of them always
            self.assertGreaterEqual(len({q for q in queries if q}), 3, name)


if __name__ == "__main__":
    unittest.main()
