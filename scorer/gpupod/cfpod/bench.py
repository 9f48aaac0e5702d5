"""Throughput of the pod's model operations on a randomly initialized model (no download):

    python3 -m cfpod.bench --device cuda --dtype bfloat16            # ~0.5B Llama-shaped model
    python3 -m cfpod.bench --device cpu --size small                 # a quick run anywhere
    python3 -m cfpod.bench --vs-transformers --json --threads 2      # against transformers (bench_hf.py)

LAPO rows on the search-QA shape (prompt ~250 tokens, 1-3 turns of 60 action + 450
observation tokens, the answer turn left out, gold template ~25 tokens; backward: one row
with every turn and one per turn replaced by the placeholder), sent in requests of at most
--budget tokens as the Go client batches them, with prefix sharing (both packings: bounded
tree packs, and the depth-first walk) and, on subsets in the same run, as padded batches
and row by row (the baselines). Then AttnSR step graphs on the default 6 layers at the
--attention-lengths (steps of ~40 action + ~160 observation tokens). Prints one line per
measurement and, with --json, a last line holding every number; --out rewrites a JSON file
after every measurement.

"counts" holds, per request and packing, what the device sees: model calls, uploads
(host to device copies) and reads (device to host), each a blocking host sync on an
accelerator, and tokens forwarded. They do not depend on the device: a CPU run checks the
design before an accelerator is lent.
"""

import argparse
import json
import os
import random
import sys
import time

import torch

from . import attention
from .devinfo import full_float32
from .model import Config, Counts, Model, dtype_from_name
from .padded import READS_PER_BATCH, UPLOADS_PER_BATCH, padded_batches
from .scoring import prepare

SIZES = {
    # Qwen2.5-0.5B's shape: 24 layers, hidden 896, 14 query / 2 KV heads of 64, tied.
    "0.5b": {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 4864,
             "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu"},
    # Qwen2.5-7B's shape: 28 layers, hidden 3584, 28 query / 4 KV heads of 128, untied.
    "7b": {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 18944,
           "vocab_size": 152064, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu"},
    "small": {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 256,
              "vocab_size": 4096, "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu"},
}


def default_layers(n):
    return [int((n - 1) * l / 27 + 0.5) for l in (8, 10, 12, 14, 16, 18)]


def search_qa_trajectory(r, vocab, placeholder):
    """Backward LAPO rows of one search-QA trajectory."""
    tok = lambda n: [r.randrange(vocab) for _ in range(n)]  # noqa: E731
    prompt = tok(240 + r.randrange(21))
    turns = [tok(55 + r.randrange(11)) + tok(430 + r.randrange(41)) for _ in range(1 + r.randrange(3))]
    template = tok(23 + r.randrange(5))
    span = (14, 14 + 4 + r.randrange(4))  # the gold answer's tokens inside the template
    rows = [(prompt + sum(turns, []), template, span)]
    for k in range(len(turns)):
        ctx = list(prompt)
        for i, t in enumerate(turns):
            ctx += [placeholder] if i == k else t
        rows.append((ctx, template, span))
    return rows


def batches(trajs, budget):
    cur, n = [], 0
    for rows in trajs:
        t = sum(len(c) + len(g) for c, g, _ in rows)
        if cur and n + t > budget:
            yield cur
            cur, n = [], 0
        cur.append(rows)
        n += t
    if cur:
        yield cur


def padded_tokens(rows):
    """Tokens a naive padded batch of these rows forwards: every row padded to the longest."""
    return len(rows) * max((len(c) + len(g) for c, g, _ in rows), default=0)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def per_request(c, n):
    """Counts of one packing over n requests, per request."""
    d = c.as_dict()
    out = {k + "_per_request": round(v / n, 1) for k, v in d.items()}
    out["host_syncs_per_request"] = round((c.uploads + c.reads) / n, 1)
    out["requests"] = n
    return out


def plan_counts(m, trajs, budget):
    """What the device would see per request, from the plans alone (no model work): the
    counts of rowrun.run_plan and padded.score_rows_padded, computed on the host."""
    out = {}
    for packing in ("tree", "walk"):
        c, n = Counts(), 0
        for b in batches(trajs, budget):
            _, u, plan = m.plan_rows([row for t in b for row in t], packing=packing)
            c.calls += len(plan.calls)
            c.uploads += 2
            c.reads += 1
            c.tokens += u.tokens_forwarded
            n += 1
        out[packing] = per_request(c, n)
    c, n = Counts(), 0
    for b in batches(trajs, budget):
        prep, _ = prepare(m.cfg, [row for t in b for row in t])
        for bt in padded_batches(prep, budget):
            c.calls += 1
            c.uploads += UPLOADS_PER_BATCH
            c.reads += READS_PER_BATCH
            c.tokens += len(bt) * max(len(prep[i][0]) for i in bt)
        n += 1
    out["padded"] = per_request(c, n)
    return out


class Results(dict):
    """The run's numbers; with a path, rewritten after every measurement (a timeout keeps
    what was measured)."""

    def __init__(self, path, **kw):
        super().__init__(**kw)
        self.path = path

    def save(self):
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self, f, indent=1)
            os.replace(tmp, self.path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--vs-transformers" in argv:  # the pod side by side with transformers (bench_hf.py)
        from . import bench_hf
        return bench_hf.main([x for x in argv if x != "--vs-transformers"])
    p = argparse.ArgumentParser(prog="cfpod.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--size", default="0.5b", choices=sorted(SIZES))
    p.add_argument("--init-on-device", action="store_true",
                   help="draw the random weights on the device (a 7B-shaped model in seconds)")
    p.add_argument("--trajectories", type=int, default=64)
    p.add_argument("--naive-trajectories", type=int, default=16, help="row-by-row baseline on this many")
    p.add_argument("--padded-trajectories", type=int, default=32, help="padded-batch baseline on this many")
    p.add_argument("--budget", type=int, default=65536, help="tokens per request (the Go client's default)")
    p.add_argument("--attention-lengths", default="8192,32768")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print every number as one JSON line at the end")
    p.add_argument("--out", help="write the numbers to this JSON file after every measurement")
    p.add_argument("--vs-transformers", action="store_true",
                   help="the pod against Hugging Face transformers on the same rows (bench_hf.py; its own flags)")
    p.add_argument("--counts-only", action="store_true",
                   help="only the per-request counts, from the plans (seconds on any CPU; no model work)")
    a = p.parse_args(argv)
    full_float32()
    dev = torch.device(a.device)
    dtype = dtype_from_name(a.dtype or ("bfloat16" if dev.type == "cuda" else "float32"))
    cfg = Config(SIZES[a.size])
    t0 = time.perf_counter()
    m = Model.random(cfg, seed=a.seed, device=dev, dtype=dtype, on_device=a.init_on_device)
    sync(dev)
    net = m.net
    params = sum(t.numel() for t in [net.embed, net.norm] + [w for L in net.layers for w in L.values()])
    if not cfg.tie_embeddings:
        params += net.lm_head.numel()
    res = Results(a.out, device=str(dev), dtype=str(dtype).replace("torch.", ""), size=a.size, params=params,
                  init_seconds=round(time.perf_counter() - t0, 2), torch=torch.__version__,
                  sdpa=attention.HAS_SDPA, enable_gqa=attention.HAS_GQA, lower_right_causal=attention.HAS_LOWER_RIGHT)
    if dev.type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(dev)
    res.save()
    print(f"model: {a.size} ({params / 1e6:.0f}M parameters, random) on {res['device']} in {res['dtype']}", flush=True)

    r = random.Random(a.seed)
    ph = cfg.vocab - 1
    trajs = [search_qa_trajectory(r, cfg.vocab - 1, ph) for _ in range(a.trajectories)]
    rows = sum(len(t) for t in trajs)
    res["planned_counts"] = plan_counts(m, trajs, a.budget)
    res.save()
    for k, v in res["planned_counts"].items():
        print(f"per request ({k}, planned): {v}", flush=True)
    if a.counts_only:
        if a.json:
            print(json.dumps(res))
        return res
    m.score_rows(trajs[0])  # warm-up (kernels, allocator)
    m.score_rows(trajs[0], packing="tree")
    sync(dev)
    best = None
    res["counts"] = {}
    for packing in ("tree", "walk"):
        fwd = rbr = pad = 0
        m.counts, n_req, packs, max_pack = Counts(), 0, 0, 0
        t0 = time.perf_counter()
        for b in batches(trajs, a.budget):
            batch_rows = [row for t in b for row in t]
            _, u = m.score_rows(batch_rows, packing=packing)
            fwd += u.tokens_forwarded
            rbr += u.tokens_row_by_row
            pad += padded_tokens(batch_rows)
            n_req += 1
            packs += u.packs
            max_pack = max(max_pack, u.max_pack_tokens)
        sync(dev)
        dt = time.perf_counter() - t0
        res["counts"][packing] = per_request(m.counts, n_req)
        m.counts = None
        res["lapo_" + packing] = {"trajectories": len(trajs), "rows": rows, "requests": n_req, "seconds": round(dt, 3),
                                  "rows_per_second": round(rows / dt, 1),
                                  "trajectories_per_second": round(len(trajs) / dt, 2),
                                  "tokens_forwarded": fwd, "tokens_row_by_row": rbr,
                                  "sharing_ratio": round(rbr / fwd, 3), "forwarded_tokens_per_second": round(fwd / dt),
                                  "tokens_padded": pad, "padded_ratio": round(pad / fwd, 3),
                                  "packs": packs, "max_pack_tokens": max_pack}
        res.save()
        print(f"LAPO {packing}: {rows} rows of {len(trajs)} trajectories in {dt:.2f} s = {rows / dt:.1f} rows/s, "
              f"{fwd / dt:.0f} forwarded tokens/s; tokens forwarded {fwd} vs row by row {rbr} ({rbr / fwd:.2f}x fewer), "
              f"vs a padded batch {pad} ({pad / fwd:.2f}x fewer); per request {res['counts'][packing]}",
              flush=True)
        best = max(best or 0, rows / dt)

    # The padded baseline: the same requests as padded batches (what a scorer without prefix
    # sharing runs), on a subset.
    sub = trajs[:a.padded_trajectories]
    prow = sum(len(t) for t in sub)
    m.counts, n_req, ptok = Counts(), 0, 0
    m.score_rows_padded(sub[0], batch_tokens=a.budget)  # warm-up
    m.counts = Counts()
    t0 = time.perf_counter()
    for b in batches(sub, a.budget):
        _, pt = m.score_rows_padded([row for t in b for row in t], batch_tokens=a.budget)
        ptok += pt
        n_req += 1
    sync(dev)
    pdt = time.perf_counter() - t0
    res["counts"]["padded"] = per_request(m.counts, n_req)
    m.counts = None
    res["lapo_padded"] = {"trajectories": len(sub), "rows": prow, "requests": n_req, "seconds": round(pdt, 3),
                          "rows_per_second": round(prow / pdt, 1), "tokens_forwarded": ptok}
    res["lapo_speedup_vs_padded"] = round(best / (prow / pdt), 2)
    res.save()
    print(f"LAPO padded batches: {prow} rows in {pdt:.2f} s = {prow / pdt:.1f} rows/s ({ptok} tokens with padding); "
          f"the faster prefix sharing is {res['lapo_speedup_vs_padded']:.2f}x faster; per request "
          f"{res['counts']['padded']}", flush=True)

    sub = trajs[:a.naive_trajectories]
    nrows = sum(len(t) for t in sub)
    t0 = time.perf_counter()
    for t in sub:
        m.score_rows_naive(t)
    sync(dev)
    ndt = time.perf_counter() - t0
    res["lapo_row_by_row"] = {"trajectories": len(sub), "rows": nrows, "seconds": round(ndt, 3),
                              "rows_per_second": round(nrows / ndt, 1)}
    res["lapo_speedup_vs_row_by_row"] = round(best / (nrows / ndt), 2)
    res.save()
    print(f"LAPO row by row: {nrows} rows in {ndt:.2f} s = {nrows / ndt:.1f} rows/s; the faster prefix sharing is "
          f"{res['lapo_speedup_vs_row_by_row']:.2f}x faster", flush=True)

    layers = default_layers(cfg.layers)
    res["attention"] = []
    for n in [int(x) for x in a.attention_lengths.split(",") if x]:
        n = min(n, cfg.max_context)
        toks = [r.randrange(cfg.vocab) for _ in range(n)]
        steps, pos = [], 200
        while pos + 200 <= n:
            steps.append(((pos, pos + 40), (pos + 40, pos + 200)))
            pos += 200
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        m.step_graphs(toks[:1024], [s for s in steps if s[1][1] <= 1024], layers)  # warm-up
        sync(dev)
        t0 = time.perf_counter()
        m.step_graphs(toks, steps, layers)
        sync(dev)
        dt = time.perf_counter() - t0
        item = {"tokens": n, "steps": len(steps), "layers": layers, "seconds": round(dt, 3),
                "tokens_per_second": round(n / dt)}
        if dev.type == "cuda":
            item["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2)
        res["attention"].append(item)
        res.save()
        print(f"AttnSR graphs: {n} tokens, {len(steps)} steps, layers {layers}: {dt:.2f} s"
              + (f", peak memory {item['peak_memory_gib']} GiB" if "peak_memory_gib" in item else ""), flush=True)
    if dev.type == "cuda":
        res["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2)
        print(f"peak memory: {res['peak_memory_gib']} GiB", flush=True)
    res.save()
    if a.json:
        print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
