import unittest

import numpy as np

import creditflow
from creditflow import wire

from .util import sample_datum

try:
    import torch
except ImportError:
    torch = None


def samples():
    return [creditflow.decode_sample(wire.codec("Sample").encode(sample_datum(n, seed=i)))
            for i, n in enumerate((5, 9, 3))]


class Padded(unittest.TestCase):
    def test_shapes_and_values(self):
        ss = samples()
        b = creditflow.to_numpy(ss)
        self.assertEqual(b["input_ids"].shape, (3, 9))
        for i, s in enumerate(ss):
            n = s["tokens"].size
            np.testing.assert_array_equal(b["input_ids"][i, :n], s["tokens"])
            np.testing.assert_array_equal(b["input_ids"][i, n:], 0)
            np.testing.assert_array_equal(b["attention_mask"][i], [1] * n + [0] * (9 - n))
            np.testing.assert_array_equal(b["loss_mask"][i, :n], s["loss_mask"])
            np.testing.assert_array_equal(b["advantages"][i, :n], s["advantages"])
            np.testing.assert_array_equal(b["rollout_logprobs"][i, :n], s["rollout_logprobs"])
            self.assertFalse(b["loss_mask"][i, n:].any())
        np.testing.assert_array_equal(b["token_rewards"], 0)
        np.testing.assert_array_equal(b["scorer_policy_version"], [6, 6, 6])
        self.assertEqual(b["trajectory_ids"], [s["trajectory_id"] for s in ss])

    def test_pad_id_and_multiple(self):
        b = creditflow.to_numpy(samples(), pad_id=7, pad_to_multiple=8)
        self.assertEqual(b["input_ids"].shape, (3, 16))
        self.assertEqual(b["input_ids"][2, 5], 7)
        self.assertEqual(b["attention_mask"][2, 5], 0)


class Packed(unittest.TestCase):
    def test_packed_equals_padded_rows(self):
        ss = samples()
        p = creditflow.to_numpy(ss, packed=True)
        d = creditflow.to_numpy(ss)
        np.testing.assert_array_equal(p["cu_seqlens"], [0, 5, 14, 17])
        self.assertEqual(p["input_ids"].shape, (1, 17))
        self.assertEqual(p["max_seqlen"], 9)
        for i, s in enumerate(ss):
            a, e = p["cu_seqlens"][i], p["cu_seqlens"][i + 1]
            n = e - a
            np.testing.assert_array_equal(p["position_ids"][0, a:e], np.arange(n))
            for f in ("input_ids", "loss_mask", "advantages", "rollout_logprobs"):
                np.testing.assert_array_equal(p[f][0, a:e], d[f][i, :n], f)


@unittest.skipIf(torch is None, "torch not installed")
class Torch(unittest.TestCase):
    def test_tensors(self):
        t = creditflow.to_torch(samples())
        self.assertEqual(t["input_ids"].dtype, torch.int64)
        self.assertEqual(t["advantages"].dtype, torch.float32)
        # a GRPO-style token loss runs on them
        logp = torch.zeros_like(t["advantages"], requires_grad=True)
        ratio = torch.exp(logp - t["rollout_logprobs"])
        loss = -(ratio * t["advantages"] * t["loss_mask"]).sum() / t["loss_mask"].sum()
        loss.backward()
        self.assertTrue(torch.isfinite(loss))
        p = creditflow.to_torch(samples(), packed=True)
        self.assertEqual(p["cu_seqlens"].dtype, torch.int32)


if __name__ == "__main__":
    unittest.main()
