import math
import os
import random
import shutil
import tempfile
import unittest

import torch

from cfpod.model import Config, InputError, Model, ModelError
from tests.util import DEVICE, ON_CPU, TOL, model_from, small_config, write_checkpoint

# Same arithmetic on different batch shapes: float32 rounding of the last bits at most
# (relative; scores of order 10).
SAME = 1e-6  # relative

ARCHS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def ref_log_probs(cfg, ts, seq, temperature=1.0):
    """A straightforward float64 forward without cache (HF semantics): [N, V] log-probs of
    the logits divided by temperature."""
    W = {n: t.double() for n, t in ts.items()}
    N, H, KV, D = len(seq), cfg.heads, cfg.kv_heads, cfg.head_dim
    eps = cfg.rms_norm_eps
    ang = (torch.arange(N, dtype=torch.float32)[:, None] * cfg.inv_freq[None, :]).double()
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rms(v, w):
        return w * v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps)

    def rope(v):
        h = D // 2
        return v * cos[:, None] + torch.cat([-v[..., h:], v[..., :h]], -1) * sin[:, None]

    x = W["model.embed_tokens.weight"][torch.tensor(seq)]
    for l in range(cfg.layers):
        p = f"model.layers.{l}."

        def lin(name, v):
            out = v @ W[p + name + ".weight"].T
            return out + W[p + name + ".bias"] if p + name + ".bias" in W else out
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin("self_attn.q_proj", h).view(N, H, D)
        k = lin("self_attn.k_proj", h).view(N, KV, D)
        v = lin("self_attn.v_proj", h).view(N, KV, D)
        if cfg.qk_norm:
            q, k = rms(q, W[p + "self_attn.q_norm.weight"]), rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        att = torch.zeros(N, H, D, dtype=torch.float64)
        mask = torch.triu(torch.ones(N, N, dtype=torch.bool), 1)
        for hh in range(H):
            g = hh // (H // KV)
            s = (q[:, hh] @ k[:, g].T / math.sqrt(D)).masked_fill(mask, float("-inf"))
            att[:, hh] = torch.softmax(s, -1) @ v[:, g]
        x = x + lin("self_attn.o_proj", att.reshape(N, -1))
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + lin("mlp.down_proj", torch.nn.functional.silu(lin("mlp.gate_proj", h)) * lin("mlp.up_proj", h))
    x = rms(x, W["model.norm.weight"])
    head = W["model.embed_tokens.weight"] if cfg.tie_embeddings else W["lm_head.weight"]
    return torch.log_softmax(x @ head.T / temperature, -1)


def ref_score(cfg, ts, ctx, tgt, span, temperature=1.0):
    seq = list(ctx) + list(tgt)
    lp = ref_log_probs(cfg, ts, seq, temperature)
    a, b = span
    return sum(float(lp[len(ctx) + k - 1, seq[len(ctx) + k]]) for k in range(a, b)) / (b - a)


def search_rows(r, vocab, placeholder, turns=3):
    """LAPO backward rows of one search-QA-shaped trajectory."""
    tok = lambda n: [r.randrange(vocab) for _ in range(n)]  # noqa: E731
    prompt = tok(20 + r.randrange(10))
    ts = [tok(5 + r.randrange(5)) + tok(10 + r.randrange(10)) for _ in range(turns)]
    target = tok(12)
    span = (2, 2 + 3 + r.randrange(6))
    rows = [(prompt + sum(ts, []), target, span)]
    for k in range(turns):
        ctx = list(prompt)
        for i, t in enumerate(ts):
            ctx += [placeholder] if i == k else t
        rows.append((ctx, target, span))
    return rows


class ScoreTest(unittest.TestCase):
    def test_matches_float64_reference_on_every_architecture(self):
        r = random.Random(1)
        for arch in ARCHS:
            with self.subTest(arch=arch):
                h = small_config(arch)
                m, ts = model_from(h, seed=3)
                rows = search_rows(r, 96, 96) + search_rows(r, 96, 96, turns=1)
                for packing in ("walk", "tree"):
                    got, _ = m.score_rows(rows, packing=packing)
                    for i, (c, t, s) in enumerate(rows):
                        want = ref_score(m.cfg, ts, c, t, s)
                        self.assertAlmostEqual(got[i], want, delta=TOL, msg=f"{packing} row {i}")

    def test_prefix_sharing_equals_row_by_row_and_counts_tokens(self):
        r = random.Random(2)
        m, _ = model_from(small_config("Qwen3ForCausalLM"), seed=4)
        rows = search_rows(r, 96, 96) + search_rows(r, 96, 96) + [search_rows(r, 96, 96)[0]] * 2
        rows.append(([5, 6, 7], [8, 9], (0, 2)))  # shares nothing
        naive, un = m.score_rows_naive(rows)
        seqs = [list(c) + list(t) for c, t, _ in rows]
        distinct = {tuple(s[:i]) for s in seqs for i in range(1, len(s) + 1)}
        for packing, budget in (("walk", 0), ("tree", 1 << 16), ("tree", 40)):
            with self.subTest(packing=packing, budget=budget):
                shared, u = m.score_rows(rows, packing=packing, pack_tokens=budget)
                for a, b in zip(shared, naive):
                    if ON_CPU and packing == "walk":
                        # Position-wise identical arithmetic: bitwise equal where the BLAS
                        # computes a row the same way whatever the batch (the reference
                        # BLAS); OpenBLAS picks kernels by shape, which moves the last bits.
                        self.assertAlmostEqual(a, b, delta=SAME * max(1.0, abs(b)))
                    else:  # masked keys change the summation order, not the terms
                        self.assertAlmostEqual(a, b, delta=TOL)
                self.assertEqual(u.tokens_forwarded, len(distinct))
                self.assertEqual(u.tokens_row_by_row, sum(map(len, seqs)))
                self.assertLess(u.tokens_forwarded, 0.7 * u.tokens_row_by_row)
        self.assertEqual(un.tokens_forwarded, un.tokens_row_by_row)

    def test_truncation_keeps_the_rightmost_context(self):
        h = small_config(max_position_embeddings=40)
        m, ts = model_from(h, seed=5)
        r = random.Random(3)
        ctx, tgt = [r.randrange(97) for _ in range(50)], [r.randrange(97) for _ in range(10)]
        (s,), u = m.score_rows([(ctx, tgt, (0, 5))])
        self.assertEqual(u.truncations, 1)
        self.assertAlmostEqual(s, ref_score(m.cfg, ts, ctx[-30:], tgt, (0, 5)), delta=TOL)
        (s2,), u2 = m.score_rows([(ctx[-30:], tgt, (0, 5))])
        self.assertEqual(u2.truncations, 0)
        self.assertAlmostEqual(s, s2, delta=1e-12 if ON_CPU else TOL)

    def test_known_value_with_zero_head(self):
        # An all-zero untied LM head gives uniform next-token probabilities: S = -log V.
        h = small_config(tie_word_embeddings=False)
        m, ts = model_from(h, seed=6)
        m.net.lm_head = torch.zeros_like(m.net.lm_head)
        (s,), _ = m.score_rows([([1, 2, 3], [4, 5, 6], (0, 3))])
        self.assertAlmostEqual(s, -math.log(97), delta=1e-9)

    def test_temperature_divides_the_logits(self):
        # Rows carry the rollout temperature as a 4th element (absent: 1). Rows of different
        # temperatures share prefixes (and the forward pass) but not their log-probabilities.
        r = random.Random(8)
        m, ts = model_from(small_config("Qwen2ForCausalLM"), seed=9)
        base = search_rows(r, 96, 96)
        rows = [base[0], base[0] + (1.0,), base[0] + (0.5,), base[0] + (1.7,), base[1] + (0.5,), base[2]]
        naive, _ = m.score_rows_naive(rows)
        for packing in ("walk", "tree"):
            with self.subTest(packing=packing):
                got, _ = m.score_rows(rows, packing=packing)
                for i, row in enumerate(rows):
                    temp = row[3] if len(row) > 3 else 1.0
                    want = ref_score(m.cfg, ts, row[0], row[1], row[2], temp)
                    self.assertAlmostEqual(got[i], want, delta=TOL, msg=f"row {i} T={temp}")
                    if ON_CPU and packing == "walk":
                        self.assertAlmostEqual(got[i], naive[i], delta=SAME * max(1.0, abs(naive[i])))
                self.assertAlmostEqual(got[0], got[1], delta=SAME * abs(got[1]))  # absent = 1
                self.assertEqual(len({got[1], got[2], got[3]}), 3, "T = 1, 0.5, 1.7 on one row")
        for bad in (0.0, -1.0, float("nan"), float("inf")):
            with self.subTest(bad=bad), self.assertRaisesRegex(InputError, "temperature"):
                m.score_rows([base[0], base[0] + (bad,)])

    def test_rejects_bad_rows(self):
        m, _ = model_from(small_config(), seed=7)
        for row, msg in ((([1], [2], (0, 2)), "span"), (([1], [2], (1, 1)), "span"),
                         (([], [2, 3], (0, 1)), "no preceding token"), (([97], [2], (0, 1)), "vocabulary"),
                         (([1], [-1], (0, 1)), "vocabulary")):
            with self.subTest(msg=msg), self.assertRaisesRegex(InputError, msg):
                m.score_rows([row])


def random_steps(r, n_steps, start=10):
    steps, pos = [], start
    for k in range(n_steps):
        a = r.randrange(0, 40) if k != 1 else 0  # step 1 has an empty action
        act = (pos, pos + a)
        pos += a
        obs = None
        if k % 3 != 2:
            o = 1 + r.randrange(30)
            obs = (pos, pos + o)
            pos += o
        steps.append((act, obs))
    return steps, pos


class StepGraphTest(unittest.TestCase):
    def test_blockwise_equals_dense(self):
        r = random.Random(4)
        for arch in ARCHS:
            m, _ = model_from(small_config(arch), seed=8)
            steps, n = random_steps(r, 9)
            toks = [r.randrange(97) for _ in range(n + 5)]
            dense = m.step_graphs_dense(toks, steps, [0, 2])
            for block in (1, 7, 128):
                with self.subTest(arch=arch, block=block):
                    got = m.step_graphs(toks, steps, [0, 2], block=block)
                    for (lg, aa, ao), (ld, daa, dao) in zip(got, dense):
                        self.assertEqual(lg, ld)
                        for X, Y in ((aa, daa), (ao, dao)):
                            for j in range(len(steps)):
                                for k in range(len(steps)):
                                    self.assertAlmostEqual(X[j][k], Y[j][k], delta=1e-6 if ON_CPU else 1e-4)

    def test_structure(self):
        r = random.Random(5)
        m, _ = model_from(small_config(), seed=9)
        steps, n = random_steps(r, 7)
        toks = [r.randrange(97) for _ in range(n)]
        graphs = m.step_graphs(toks, steps, [1, 1, 0])
        self.assertEqual([g[0] for g in graphs], [1, 1, 0])
        self.assertEqual(graphs[0][1], graphs[1][1])
        K = len(steps)
        for _, aa, ao in graphs:
            for j in range(K):
                self.assertLessEqual(sum(aa[j]) + sum(ao[j]), 1 + 1e-9)
                for k in range(K):
                    self.assertGreaterEqual(aa[j][k], 0)
                    if k >= j or steps[j][0][0] == steps[j][0][1]:
                        self.assertEqual((aa[j][k], ao[j][k]), (0.0, 0.0))
                    if steps[k][1] is None:
                        self.assertEqual(ao[j][k], 0.0)
            self.assertGreater(aa[K - 1][0], 0)

    def test_known_values_with_uniform_attention(self):
        # Zero query projections make every score 0: a query at position q attends 1/(q+1)
        # to each key <= q, so G_AA[j][k] = mean over q in A_j of |A_k| / (q + 1).
        h = small_config("Qwen2ForCausalLM")
        m, _ = model_from(h, seed=10)
        for L in m.net.layers:
            L["self_attn.q_proj.weight"] = torch.zeros_like(L["self_attn.q_proj.weight"])
            L["self_attn.q_proj.bias"] = torch.zeros_like(L["self_attn.q_proj.bias"])
        steps = [((3, 10), (10, 14)), ((14, 20), None), ((20, 300), (300, 310))]
        toks = list(range(90)) * 4
        (_, aa, ao), = m.step_graphs(toks[:310], steps, [2])
        K = len(steps)
        for j in range(K):
            (a0, a1), _ = steps[j]
            for k in range(j):
                (b0, b1), obs = steps[k]
                want_aa = sum((b1 - b0) / (q + 1) for q in range(a0, a1)) / (a1 - a0)
                want_ao = sum((obs[1] - obs[0]) / (q + 1) for q in range(a0, a1)) / (a1 - a0) if obs else 0.0
                self.assertAlmostEqual(aa[j][k], want_aa, delta=1e-6)
                self.assertAlmostEqual(ao[j][k], want_ao, delta=1e-6)

    def test_rejects_bad_input(self):
        m, _ = model_from(small_config(), seed=11)
        for toks, steps, layers, msg in (([], [((0, 0), None)], [0], "empty"),
                                         ([1] * 5, [((0, 6), None)], [0], "action range"),
                                         ([1] * 5, [((2, 3), None), ((1, 2), None)], [0], "action range"),
                                         ([1] * 5, [((0, 2), (1, 3))], [0], "observation range"),
                                         ([1] * 5, [((0, 2), None)], [3], "layer 3"),
                                         ([1] * 5, [((0, 2), None)], [], "no layers"),
                                         ([1, 99], [((0, 2), None)], [0], "vocabulary")):
            with self.subTest(msg=msg), self.assertRaisesRegex(InputError, msg):
                m.step_graphs(toks, steps, layers)


class LoadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def test_load_every_dtype_sharded(self):
        r = random.Random(6)
        rows = search_rows(r, 96, 96, turns=2)
        for arch, dtype, shards in (("LlamaForCausalLM", "F32", 1), ("Qwen2ForCausalLM", "F16", 2),
                                    ("Qwen3ForCausalLM", "BF16", 3)):
            with self.subTest(arch=arch, dtype=dtype):
                folder = os.path.join(self.dir, arch)
                h = small_config(arch)
                ts = write_checkpoint(folder, h, seed=12, dtype=dtype, shards=shards, placeholder=96)
                m = Model.load(folder, device=DEVICE)
                self.assertEqual(m.info()["placeholder_ids"], [96])
                self.assertEqual(m.info()["name"], arch)
                rnd = {"F32": lambda t: t, "F16": lambda t: t.half().float(), "BF16": lambda t: t.bfloat16().float()}[dtype]
                want = Model(Config(h), lambda n, s: rnd(ts[n]).to(DEVICE), DEVICE, torch.float32)
                got, exp = m.score_rows(rows)[0], want.score_rows(rows)[0]
                for a, b in zip(got, exp):
                    self.assertAlmostEqual(a, b, delta=0 if ON_CPU else TOL)

    def test_config_errors(self):
        for over, msg in (({"architectures": ["GPT2LMHeadModel"]}, "not supported"),
                          ({"hidden_act": "gelu"}, "hidden_act"),
                          ({"num_key_value_heads": 3}, "multiple"),
                          ({"head_dim": 7}, "even"),
                          ({"vocab_size": 0}, "vocab_size"),
                          ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "yarn")):
            with self.subTest(msg=msg), self.assertRaisesRegex(ModelError, msg):
                Config(small_config(**over))
        folder = os.path.join(self.dir, "untied")
        h = small_config(tie_word_embeddings=False)
        write_checkpoint(folder, h)
        os.rename(os.path.join(folder, "model-00001-of-00001.safetensors"), os.path.join(folder, "x.bin"))
        with self.assertRaisesRegex(ModelError, "no \\*.safetensors"):
            Model.load(folder)
        with open(os.path.join(folder, "model.safetensors"), "wb") as f:
            f.write(b"\x01")
        with self.assertRaisesRegex(ModelError, "too short"):
            Model.load(folder)

    def test_rope_scaling(self):
        base = Config(small_config()).inv_freq
        lin = Config(small_config(rope_scaling={"rope_type": "linear", "factor": 4.0})).inv_freq
        self.assertTrue(torch.allclose(lin, base / 4, rtol=1e-6))
        l3 = Config(small_config(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64})).inv_freq
        self.assertEqual(float(l3[0]), float(base[0]))            # short wavelengths unchanged
        self.assertAlmostEqual(float(l3[-1]), float(base[-1]) / 8, delta=1e-9)  # long ones divided
        with self.assertRaisesRegex(ModelError, '"use_sliding_window"'):
            Config(small_config(arch="Qwen2ForCausalLM", use_sliding_window=True, sliding_window=512,
                                max_window_layers=0))


if __name__ == "__main__":
    unittest.main()
