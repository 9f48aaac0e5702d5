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


def batch_of(seed, n=6, packed=False):
    rng = np.random.default_rng(seed)
    ss = [creditflow.decode_sample(wire.codec("Sample").encode(sample_datum(int(k), seed=seed * 100 + i)))
          for i, k in enumerate(rng.integers(200, 400, n))]
    return ss, packed


class Reuse(unittest.TestCase):
    """Batches reuse the memory of earlier ones only once nothing references it."""

    FIELDS = ("input_ids", "attention_mask", "loss_mask", "advantages", "token_rewards", "rollout_logprobs")

    def assert_same(self, got, want):
        for f in self.FIELDS:
            np.testing.assert_array_equal(got[f], want[f], f)

    def test_a_released_batch_is_reused_with_the_same_values(self):
        from creditflow.batch import _POOL
        for packed in (False, True):
            before = _POOL.reused
            for seed in range(8):
                ss, _ = batch_of(seed)
                got = creditflow.to_numpy(ss, packed=packed, pad_id=3)
                self.assert_same(got, creditflow.to_numpy(ss, packed=packed, pad_id=3, reuse=False))
                # what an earlier batch left in the memory never shows: padding and absent fields
                np.testing.assert_array_equal(got["attention_mask"].sum(axis=1), [got["lengths"].sum()] if packed else got["lengths"])
                np.testing.assert_array_equal(got["token_rewards"], 0)
                for i, n in enumerate(got["lengths"]):
                    if not packed:
                        np.testing.assert_array_equal(got["input_ids"][i, n:], 3)
                        for f in self.FIELDS[1:]:
                            np.testing.assert_array_equal(got[f][i, n:], 0, f)
                del got
            self.assertGreater(_POOL.reused, before)

    def test_fields_some_samples_lack_are_zero_there(self):
        for packed in (False, True):
            for seed in range(3):  # memory of earlier batches under it
                creditflow.to_numpy(batch_of(70 + seed)[0], packed=packed)
            ss = [creditflow.decode_sample(wire.codec("Sample").encode(sample_datum(n, seed=n, ppo=ppo)))
                  for n, ppo in ((30, False), (50, True), (20, False))]
            b = creditflow.to_numpy(ss, packed=packed)
            at = 0
            for i, s in enumerate(ss):
                n = s["tokens"].size
                row, sl = (0, slice(at, at + n)) if packed else (i, slice(0, n))
                at += n
                for f in ("advantages", "token_rewards"):
                    want = np.zeros(n, np.float32) if s[f] is None else s[f]
                    np.testing.assert_array_equal(b[f][row, sl], want, f)
                np.testing.assert_array_equal(b["attention_mask"][row, sl], 1)
            if not packed:
                np.testing.assert_array_equal(b["attention_mask"].sum(axis=1), [30, 50, 20])

    def test_held_batches_and_their_parts_are_never_written(self):
        kept, want = [], []
        for seed in range(12):
            ss, _ = batch_of(seed)
            b = creditflow.to_numpy(ss, packed=seed % 2 == 1)
            # what a trainer might keep: the whole batch, one array, a view of one
            kept.append((b, b["advantages"], b["input_ids"][:, 1:], b["loss_mask"].reshape(-1)[5:])[seed % 4])
            want.append(creditflow.to_numpy(ss, packed=seed % 2 == 1, reuse=False))
            for seed2 in range(3):  # batches built and dropped in between
                creditflow.to_numpy(batch_of(50 + seed2)[0], packed=seed2 == 1)
        for seed, (k, w) in enumerate(zip(kept, want)):
            if seed % 4 == 0:
                self.assert_same(k, w)
            elif seed % 4 == 1:
                np.testing.assert_array_equal(k, w["advantages"])
            elif seed % 4 == 2:
                np.testing.assert_array_equal(k, w["input_ids"][:, 1:])
            else:
                np.testing.assert_array_equal(k, w["loss_mask"].reshape(-1)[5:])

    def test_threads_never_share_live_memory(self):
        import threading
        inputs = [batch_of(90 + i)[0] for i in range(4)]
        wants = [creditflow.to_numpy(ss, reuse=False) for ss in inputs]
        errors = []

        def work(k):
            held = []
            for r in range(30):
                b = creditflow.to_numpy(inputs[(k + r) % 4])
                held.append(((k + r) % 4, b))
                if len(held) > 3:
                    held.pop(0)  # released: its memory may go to any thread
                for j, h in held:
                    for f in self.FIELDS:
                        if not np.array_equal(h[f], wants[j][f]):
                            errors.append((k, r, f))

        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

    def test_pool_is_bounded(self):
        from creditflow._recycle import ArrayPool
        pool = ArrayPool(max_buffers=4)
        held = [pool.empty((64, 1000 * (i + 1)), np.int64) for i in range(10)]
        self.assertLessEqual(len(pool._bufs), 4)
        for i, a in enumerate(held):  # dropped from the pool, still the caller's
            a.fill(i)
        for i, a in enumerate(held):
            self.assertTrue((a == i).all())
        # bytes: a pool of at most 1 MiB keeps at most 1 MiB once the arrays are dropped
        pool = ArrayPool(max_bytes=1 << 20)
        for i in range(10):
            pool.empty((100 + 30 * i, 1000), np.uint8)
        self.assertLessEqual(sum(b.nbytes for b in pool._bufs), max(1 << 20, pool._bufs[-1].nbytes))
        self.assertGreater(pool.allocated, 1)

    @unittest.skipIf(torch is None, "torch not installed")
    def test_a_held_tensor_keeps_its_memory(self):
        ss, _ = batch_of(1)
        t = creditflow.to_torch(ss)["advantages"]  # the dict and its arrays are dropped; the tensor is not
        want = t.clone()
        for seed in range(10):
            creditflow.to_torch(batch_of(20 + seed)[0])
        self.assertTrue(torch.equal(t, want))


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
