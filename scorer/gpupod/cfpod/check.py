"""Agreement of the accelerator path with CPU float32, and of bfloat16 attention with float32:

    python3 -m cfpod.check [--device cuda]

1. Scores LAPO rows (walk and tree packing) and computes AttnSR step graphs with the same
   weights on CPU in float32 (the reference path, which matches the Go reference scorer)
   and on --device in float32; fails past --tol-score on S or --tol-graph on a graph entry.
   TF32 is switched off first (devinfo.full_float32): float32 matmuls in TF32 differ by
   ~1e-2 on S and fail this gate.
2. Runs the pod's three attention calls (a whole sequence, an edge on a cached prefix, a
   tree-packed mask) on --device in bfloat16 and in float32 on the same (bfloat16-rounded)
   inputs; fails past --tol-attention. Whole-model bfloat16 scores of a random model differ
   from float32 by far more than a kernel bug would (they are reported, not judged), so
   kernels are gated here, one call at a time.
Exits 1 when a gate fails; prints one line per comparison and the TF32 settings in force.
"""

import argparse
import random
import sys

import torch

from . import attention
from .bench import search_qa_trajectory
from .devinfo import full_float32, tf32_settings
from .model import Config, Model

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 6,
          "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 704,
          "vocab_size": 8192, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "tie_word_embeddings": True, "hidden_act": "silu"}


# For dry runs of gpu_check.sh on CPU: the same code on a model small enough to take seconds.
TINY = dict(CONFIG, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=128, vocab_size=512)


def inputs(cfg, trajectories, tokens, seed=3):
    r = random.Random(seed)
    rows = [row for _ in range(trajectories) for row in search_qa_trajectory(r, cfg.vocab - 1, cfg.vocab - 1)]
    toks = [r.randrange(cfg.vocab) for _ in range(tokens)]
    steps, pos = [], 100
    while pos + 150 <= tokens:
        steps.append(((pos, pos + 50), (pos + 50, pos + 150) if len(steps) % 4 != 3 else None))
        pos += 150
    return rows, toks, steps, [1, 3, 5]


def max_diffs(model, rows, toks, steps, layers, ref):
    """max |dS| over both packings and max |dG| of model against ref = (scores, graphs)."""
    ref_s, ref_g = ref
    ds = 0.0
    for packing in ("walk", "tree"):
        s, _ = model.score_rows(rows, packing=packing)
        ds = max([ds] + [abs(x - y) for x, y in zip(s, ref_s)])
    g = model.step_graphs(toks, steps, layers)
    dg = max(abs(x - y) for (_, aa, ao), (_, raa, rao) in zip(g, ref_g)
             for X, Y in ((aa, raa), (ao, rao)) for rx, ry in zip(X, Y) for x, y in zip(rx, ry))
    return ds, dg


def attention_calls(dev, heads=28, kv_heads=4, head_dim=128, S=4096, T=512, seed=0):
    """The pod's three attention calls on random inputs: {name: (q, K, V, kwargs)}."""
    g = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, device=dev)  # noqa: E731
    q, K, V = r(T, heads, head_dim), r(kv_heads, S, head_dim), r(kv_heads, S, head_dim)
    # A pack: a shared prefix node, then branches of 256 tokens each under it.
    node = torch.clamp((torch.arange(S, device=dev) - 256) // 256 + 1, min=0)
    n = int(node.max()) + 1
    anc = torch.eye(n, dtype=torch.bool, device=dev)
    anc[:, 0] = True
    keys = torch.arange(S, device=dev)
    qi = torch.arange(S - T, S, device=dev)
    mask = anc[node[qi]][:, node] & (keys[None, :] <= qi[:, None])
    return {"whole sequence (causal)": (r(S // 4, heads, head_dim), K[:, :S // 4], V[:, :S // 4], {"causal": True}),
            "cached prefix (lower-right causal)": (q, K, V, {"causal": True}),
            "tree pack (mask)": (q, K, V, {"mask": mask})}


def attention_diffs(dev, use_sdpa, **shape):
    """{call: max |bf16 - float32|} on the same bfloat16-rounded inputs."""
    out = {}
    for name, (q, K, V, kw) in attention_calls(dev, **shape).items():
        qb, Kb, Vb = q.bfloat16(), K.bfloat16(), V.bfloat16()
        want = attention.attend(qb.float(), Kb.float(), Vb.float(), use_sdpa=False, **kw)
        got = attention.attend(qb, Kb, Vb, use_sdpa=use_sdpa, **kw).float()
        out[name] = float((got - want).abs().max())
    return out


def main(argv=None):
    full_float32()
    p = argparse.ArgumentParser(prog="cfpod.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--trajectories", type=int, default=6)
    p.add_argument("--tokens", type=int, default=3000, help="length of the attention job")
    p.add_argument("--tol-score", type=float, default=1e-3)
    p.add_argument("--tol-graph", type=float, default=1e-4)
    p.add_argument("--tol-attention", type=float, default=2e-2,
                   help="bfloat16 vs float32 attention output (values of order 1)")
    p.add_argument("--tiny", action="store_true", help="a tiny model (dry runs on CPU)")
    p.add_argument("--bf16-model", action="store_true", help="also the whole-model bfloat16 line on CPU (slow)")
    a = p.parse_args(argv)
    print("tf32 in force: " + ", ".join(f"{k}={v}" for k, v in tf32_settings().items()), flush=True)
    dev = torch.device(a.device)
    cfg = Config(TINY if a.tiny else CONFIG)
    rows, toks, steps, layers = inputs(cfg, a.trajectories, a.tokens)
    cpu = Model.random(cfg, seed=5)  # the same seed draws the same weights on every device
    ref = (cpu.score_rows(rows)[0], cpu.step_graphs(toks, steps, layers))
    ok = True
    # bfloat16 matmuls on CPU are slow (minutes here): the whole-model bfloat16 line is a device's.
    for dtype in (torch.float32, torch.bfloat16) if dev.type == "cuda" or a.bf16_model else (torch.float32,):
        m = Model.random(cfg, seed=5, device=dev, dtype=dtype)
        ds, dg = max_diffs(m, rows, toks, steps, layers, ref)
        name = str(dtype).replace("torch.", "")
        verdict = " (reported, not judged)"
        if dtype == torch.float32:
            good = ds <= a.tol_score and dg <= a.tol_graph
            ok = ok and good
            verdict = " OK" if good else f" FAIL (tolerances {a.tol_score:g} / {a.tol_graph:g})"
        print(f"model: {a.device} {name} vs cpu float32: {len(rows)} rows max |dS| = {ds:.3e}; "
              f"{len(steps)} steps x {len(layers)} layers on {a.tokens} tokens max |dG| = {dg:.3e}{verdict}",
              flush=True)
    shape = {} if dev.type == "cuda" else {"heads": 8, "kv_heads": 2, "head_dim": 32, "S": 512, "T": 64}
    use_sdpa = dev.type == "cuda" and attention.HAS_SDPA
    for name, d in attention_diffs(dev, use_sdpa, **shape).items():
        good = d <= a.tol_attention
        ok = ok and good
        print(f"attention: {name} on {a.device} ({'sdpa' if use_sdpa else 'reference path'}) bfloat16 vs float32, "
              f"same inputs: max |dO| = {d:.3e}" + (" OK" if good else f" FAIL (tolerance {a.tol_attention:g})"),
              flush=True)
    if dev.type == "cuda":
        print(f"peak memory: {torch.cuda.max_memory_allocated(dev) / 2 ** 30:.3f} GiB", flush=True)
    print("check: " + ("PASS" if ok else "FAIL"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
