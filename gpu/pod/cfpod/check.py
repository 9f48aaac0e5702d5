"""Agreement of the accelerator path with CPU float32 on one randomly initialized model:

    python3 -m cfpod.check [--device cuda]

Scores LAPO rows and computes AttnSR step graphs with the same weights on CPU in float32
(the reference path, which matches the Go reference scorer) and on --device in float32
and in bfloat16, prints the largest differences, and exits 1 when float32 on the device
differs by more than --tol-score on S or --tol-graph on a graph entry. bfloat16 numbers
are reported, not judged (they differ by design).
"""

import argparse
import random
import sys

import torch

from .bench import search_qa_trajectory
from .model import Config, Model

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 6,
          "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 704,
          "vocab_size": 8192, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
          "tie_word_embeddings": True, "hidden_act": "silu"}


def main(argv=None):
    p = argparse.ArgumentParser(prog="cfpod.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--trajectories", type=int, default=6)
    p.add_argument("--tokens", type=int, default=3000, help="length of the attention job")
    p.add_argument("--tol-score", type=float, default=1e-3)
    p.add_argument("--tol-graph", type=float, default=1e-4)
    a = p.parse_args(argv)
    cfg = Config(CONFIG)
    cpu = Model.random(cfg, seed=5)  # the same seed draws the same weights on every device

    r = random.Random(3)
    rows = [row for _ in range(a.trajectories) for row in search_qa_trajectory(r, cfg.vocab - 1, cfg.vocab - 1)]
    toks = [r.randrange(cfg.vocab) for _ in range(a.tokens)]
    steps, pos = [], 100
    while pos + 150 <= a.tokens:
        steps.append(((pos, pos + 50), (pos + 50, pos + 150) if len(steps) % 4 != 3 else None))
        pos += 150
    layers = [1, 3, 5]
    ref_s, _ = cpu.score_rows(rows)
    ref_g = cpu.step_graphs(toks, steps, layers)
    ok = True
    for dtype in (torch.float32, torch.bfloat16):
        m = Model.random(cfg, seed=5, device=a.device, dtype=dtype)
        s, u = m.score_rows(rows)
        g = m.step_graphs(toks, steps, layers)
        ds = max(abs(x - y) for x, y in zip(s, ref_s))
        dg = max(abs(x - y) for (_, aa, ao), (_, raa, rao) in zip(g, ref_g)
                 for X, Y in ((aa, raa), (ao, rao)) for rx, ry in zip(X, Y) for x, y in zip(rx, ry))
        name = str(dtype).replace("torch.", "")
        verdict = ""
        if dtype == torch.float32:
            good = ds <= a.tol_score and dg <= a.tol_graph
            ok = ok and good
            verdict = " OK" if good else f" FAIL (tolerances {a.tol_score:g} / {a.tol_graph:g})"
        print(f"{a.device} {name} vs cpu float32: {len(rows)} rows max |dS| = {ds:.3e}; "
              f"{len(steps)} steps x {len(layers)} layers on {a.tokens} tokens max |dG| = {dg:.3e}{verdict}",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
