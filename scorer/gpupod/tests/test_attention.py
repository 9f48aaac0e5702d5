"""The accelerator attention path (torch's scaled_dot_product_attention with enable_gqa and
the lower-right causal bias) against the float32 reference path.

Debian's torch (1.13) has no scaled_dot_product_attention, so on such a torch the SDPA path
runs on sdpa_reference below: the documented contract of torch's function (boolean masks,
is_causal aligned top-left, enable_gqa), written out in float64. Where torch has the
function, the tests also run the path on torch's own kernels."""

import contextlib
import math
import random
import unittest

import torch

from cfpod import attention
from tests.test_model import search_rows
from tests.util import DEVICE, TOL, model_from, small_config


def sdpa_reference(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's contract in float64."""
    H, Hk = q.shape[-3], k.shape[-3]
    if Hk != H:
        if not enable_gqa:
            raise RuntimeError(f"{H} query heads over {Hk} key heads need enable_gqa")
        k, v = k.repeat_interleave(H // Hk, -3), v.repeat_interleave(H // Hk, -3)
    T, S = q.shape[-2], k.shape[-2]
    sc = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        assert attn_mask is None
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()  # top-left
    if attn_mask is not None:
        assert attn_mask.dtype == torch.bool
        sc = sc.masked_fill(~attn_mask, float("-inf"))
    return (torch.softmax(sc, -1) @ v.double()).to(q.dtype)


@contextlib.contextmanager
def sdpa_path(gqa, lower_right, sdpa=sdpa_reference, masked_scores=None):
    saved = (attention.HAS_GQA, attention.HAS_LOWER_RIGHT, attention._sdpa, attention._lower_right,
             attention.MASKED_SCORES, attention.HAS_LOWER_RIGHT_GQA)
    calls = []

    def counting(*a, **k):
        calls.append(k)
        return sdpa(*a, **k)
    attention.HAS_GQA, attention.HAS_LOWER_RIGHT, attention._sdpa = gqa, lower_right, counting
    attention.HAS_LOWER_RIGHT_GQA = gqa and lower_right
    if sdpa is sdpa_reference:
        attention._lower_right = attention.causal_mask
    if masked_scores:
        attention.MASKED_SCORES = masked_scores
    try:
        yield calls
    finally:
        (attention.HAS_GQA, attention.HAS_LOWER_RIGHT, attention._sdpa, attention._lower_right,
         attention.MASKED_SCORES, attention.HAS_LOWER_RIGHT_GQA) = saved


class AttendTest(unittest.TestCase):
    def inputs(self, T, S, H=8, KV=2, D=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        r = lambda *s: (torch.rand(*s, generator=g) * 2 - 1).to(DEVICE)  # noqa: E731
        return r(T, H, D), r(KV, S, D), r(KV, S, D)

    def test_sdpa_path_equals_reference_path(self):
        g = torch.Generator().manual_seed(1)
        kernels = [("reference", sdpa_reference)]
        if attention.HAS_SDPA:
            kernels.append(("torch", attention.F.scaled_dot_product_attention))
        for name, kernel in kernels:
            for gqa in (False, True):
                for lower_right in (False, True):
                    if name == "torch" and (gqa and not attention.HAS_GQA or lower_right and not attention.HAS_LOWER_RIGHT
                                            or gqa and lower_right and not attention.HAS_LOWER_RIGHT_GQA):
                        continue
                    for T, S in ((12, 12), (5, 12), (1, 9)):
                        q, K, V = self.inputs(T, S, seed=T * 100 + S)
                        mask = torch.rand(T, S, generator=g).to(DEVICE) < 0.6
                        mask[:, 0] = True
                        for kw in ({"causal": True}, {"mask": mask}):
                            with self.subTest(kernel=name, gqa=gqa, lower_right=lower_right, T=T, S=S, kw=list(kw)):
                                want = attention.attend(q, K, V, use_sdpa=False, **kw)
                                with sdpa_path(gqa, lower_right, kernel, masked_scores=3 * 8 * S) as calls:
                                    got = attention.attend(q, K, V, use_sdpa=True, **kw)
                                self.assertEqual(got.shape, (T, 8 * 16))
                                self.assertLess(float((got - want).abs().max()), 1e-5)
                                causal_fused = "causal" in kw and (T == S or lower_right)
                                if causal_fused:
                                    self.assertEqual(len(calls), 1)
                                    self.assertEqual(calls[0].get("enable_gqa", False), gqa)
                                    self.assertEqual(calls[0].get("is_causal", False), T == S)
                                else:  # masked: chunks of at most MASKED_SCORES scores
                                    self.assertEqual(len(calls), -(-T // 3))
                                    self.assertNotIn("enable_gqa", calls[0])

    def test_mask_from_equals_the_whole_mask(self):
        # A pack on a cached path: keys [0, p) visible to every query, the mask over the rest.
        g = torch.Generator().manual_seed(2)
        q, K, V = self.inputs(6, 20)
        inner = torch.rand(6, 8, generator=g).to(DEVICE) < 0.5
        inner[:, 0] = True
        whole = torch.cat([torch.ones(6, 12, dtype=torch.bool, device=DEVICE), inner], 1)
        want = attention.attend(q, K, V, mask=whole)
        self.assertTrue(torch.equal(attention.attend(q, K, V, mask=inner, mask_from=12), want))
        with sdpa_path(True, True):
            got = attention.attend(q, K, V, mask=inner, mask_from=12, use_sdpa=True)
        self.assertLess(float((got - want).abs().max()), 1e-5)

    def test_lower_right_alignment(self):
        # One query over a 9-key prefix sees all 9 keys (top-left alignment would give 1).
        q, K, V = self.inputs(1, 9, H=2, KV=2)
        full = attention.attend(q, K, V, mask=torch.ones(1, 9, dtype=torch.bool, device=DEVICE))
        one = attention.attend(q, K, V, mask=torch.arange(9, device=DEVICE)[None] == 0)
        got = attention.attend(q, K, V, causal=True)
        self.assertTrue(torch.equal(got, full))
        self.assertFalse(torch.allclose(got, one))
        with sdpa_path(True, True):
            self.assertLess(float((attention.attend(q, K, V, causal=True, use_sdpa=True) - full).abs().max()), 1e-6)


class ModelOnSdpaPathTest(unittest.TestCase):
    def test_scores_and_graphs_equal_the_reference_path(self):
        r = random.Random(11)
        m, _ = model_from(small_config("Qwen2ForCausalLM"), seed=12)
        rows = search_rows(r, 96, 96) + search_rows(r, 96, 96, turns=2)
        toks = [r.randrange(97) for _ in range(200)]
        steps = [((10, 30), (30, 60)), ((60, 90), None), ((90, 150), (150, 200))]
        ref = {p: m.score_rows(rows, packing=p)[0] for p in ("walk", "tree")}
        ref_g = m.step_graphs(toks, steps, [0, 2])
        m.use_sdpa = True
        for gqa in (False, True):
            for lower_right in (False, True):
                with self.subTest(gqa=gqa, lower_right=lower_right), sdpa_path(gqa, lower_right) as calls:
                    for p in ("walk", "tree"):
                        got, _ = m.score_rows(rows, packing=p)
                        for a, b in zip(got, ref[p]):
                            self.assertAlmostEqual(a, b, delta=TOL)
                    self.assertGreater(len(calls), 0)
                    g = m.step_graphs(toks, steps, [0, 2])
                    for (_, aa, ao), (_, raa, rao) in zip(g, ref_g):
                        for X, Y in ((aa, raa), (ao, rao)):
                            for x, y in zip(sum(X, []), sum(Y, [])):
                                self.assertAlmostEqual(x, y, delta=1e-6)


def torch_version():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@unittest.skipUnless(torch_version() >= (2, 5), "torch's kernels with enable_gqa need torch 2.5")
class ModelOnTorchSdpaTest(unittest.TestCase):
    """The model on torch's own scaled_dot_product_attention (set_attention("sdpa"), as
    `cfpod --attention sdpa` on any device) against the reference path: every feature the
    accelerator path uses runs here, on the device of the test run."""

    def test_the_features_are_there(self):
        self.assertTrue(attention.HAS_SDPA and attention.HAS_GQA and attention.HAS_LOWER_RIGHT
                        and attention.HAS_LOWER_RIGHT_GQA)

    def test_scores_and_graphs_equal_the_reference_path(self):
        r = random.Random(13)
        for arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"):
            m, _ = model_from(small_config(arch), seed=14)
            rows = search_rows(r, 96, 96) + search_rows(r, 96, 96, turns=3)
            toks = [r.randrange(97) for _ in range(220)]
            steps = [((10, 30), (30, 60)), ((60, 90), None), ((90, 150), (150, 220))]
            m.set_attention("reference")
            ref = {p: m.score_rows(rows, packing=p)[0] for p in ("walk", "tree")}
            ref_g = m.step_graphs(toks, steps, [0, 2])
            m.set_attention("sdpa")
            kinds = []
            real = attention._sdpa

            def seen(*a, **k):
                mask = k.get("attn_mask")
                kinds.append(("gqa" if k.get("enable_gqa") else "repeated",
                              "causal" if k.get("is_causal") else "none" if mask is None
                              else "bool" if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
                              else type(mask).__name__))
                return real(*a, **k)
            attention._sdpa = seen
            try:
                got = {p: m.score_rows(rows, packing=p)[0] for p in ("walk", "tree")}
                g = m.step_graphs(toks, steps, [0, 2])
            finally:
                attention._sdpa = real
            with self.subTest(arch=arch):
                # Walk edges on a cached prefix take the lower-right causal bias with grouped
                # heads; tree packs and chosen positions take boolean masks.
                self.assertIn(("gqa", "CausalBias"), kinds)
                self.assertIn(("repeated", "bool"), kinds)
                for p in ("walk", "tree"):
                    self.assertEqual(len(got[p]), len(ref[p]))
                    for a, b in zip(got[p], ref[p]):
                        self.assertAlmostEqual(a, b, delta=TOL)
                for (_, aa, ao), (_, raa, rao) in zip(g, ref_g):
                    for X, Y in ((aa, raa), (ao, rao)):
                        for x, y in zip(sum(X, []), sum(Y, [])):
                            self.assertAlmostEqual(x, y, delta=1e-6)

    def test_tree_packs_without_scored_tokens(self):
        # Packs of at most 64 tokens split a subtree: the first pack holds a shared context and
        # no scored token, so its last layer has no queries. The fused path attended over
        # zero queries and failed (torch.cat of no chunks); it scores as the reference does.
        r = random.Random(5)
        rows = []
        for _ in range(3):
            ctx = [r.randrange(97) for _ in range(r.randrange(1, 40))]
            for _ in range(4):
                tgt = [r.randrange(97) for _ in range(r.randrange(2, 30))]
                rows.append((ctx, tgt, (0, len(tgt))))
        m, _ = model_from(small_config(), seed=3)
        _, _, plan = m.plan_rows(rows, packing="tree", pack_tokens=64)
        self.assertTrue(any(c[0] != "edge" and c[-1] is None for c in plan.calls), "no pack without scored tokens")
        ref = m.score_rows(rows, packing="walk")[0]
        m.set_attention("sdpa")
        got = m.score_rows(rows, packing="tree", pack_tokens=64)[0]
        for a, b in zip(got, ref):
            self.assertAlmostEqual(a, b, delta=TOL)

    def test_set_attention_refuses_other_kinds(self):
        m, _ = model_from(small_config(), seed=1)
        with self.assertRaises(ValueError):
            m.set_attention("flash")


if __name__ == "__main__":
    unittest.main()
