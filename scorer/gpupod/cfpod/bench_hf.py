"""The pod side by side with Hugging Face transformers, same CPU (or device), same rows:

    python -m cfpod.bench --vs-transformers --json --threads 2      # Qwen2.5-0.5B's config cut to 2 layers

A random-weight Qwen2ForCausalLM is built by transformers from Qwen2.5-0.5B-Instruct's
published config with its layers cut to --layers, saved with save_pretrained, and both the
pod (Model.load) and transformers load that folder: the same weights.

LAPO rows (backward: one row with every turn and one per turn replaced by the placeholder) of
search-QA trajectories (prompt ~250 tokens, 1-3 turns of ~60 action + ~450 observation tokens)
and of 8k ones (the same with observations stretched so a trajectory holds 8,192 tokens) are
scored four ways, each timed over the same rows:

- pod: Model.score_rows, a trajectory's rows in one request, with the pod's CPU default
  attention (float32 scores in query blocks, the Go reference's arithmetic) and as pod_sdpa
  with torch's scaled_dot_product_attention (the pod's --attention sdpa);
- padded: transformers with all rows of a trajectory left-padded to the longest and one
  forward (what the LAPO authors' code does), positions from the attention mask and logits
  only at the target positions (logits_to_keep; without it an 8k batch's logits alone take
  24 GB);
- prefix_cache: transformers forwarding each trajectory's common prefix once into a
  DynamicCache, then every row's suffix on it, the cache cropped back to the prefix after
  each row (instead of a copy of the cache per row: the same keys and values).

Methods take turns trajectory by trajectory, in rotating order, so a busy host's slow spells
fall on all alike; with --rounds N each trajectory is timed N times per method and the
fastest counts. Tokens forwarded are exact counts (pod: its plan; padded: rows x longest row; prefix_cache:
prefix + every suffix). The scores are compared with the pod's (max |difference|).

AttnSR capture at --capture-lengths tokens: the pod's blockwise step graphs against
transformers' eager attention with output_attentions=True folded into the same graphs
(docs/method.md §3.1), each in a fresh subprocess that reports its time and its peak resident
memory (VmHWM: torch's allocations included, the loaded model too), on a --capture-layers model (eager
attention holds heads x N x N floats per layer: 3.8 GB per layer at 8k).
"""

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import torch

# Qwen2.5-0.5B-Instruct's config.json as published (layers are cut with --layers).
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# A few-million-parameter model of the same structure, for the test that keeps this bench working.
TINY = dict(QWEN25_05B, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512, max_position_embeddings=4096, bos_token_id=None, eos_token_id=None)


def save_model(folder, hf_config, layers, seed):
    """Builds the transformers model of hf_config with `layers` layers (random weights, seed)
    and saves it to folder; returns the config written."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = dict(hf_config, num_hidden_layers=layers, torch_dtype="float32")
    torch.manual_seed(seed)
    conf = Qwen2Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")})
    conf.architectures = ["Qwen2ForCausalLM"]
    m = Qwen2ForCausalLM(conf).eval()
    m.save_pretrained(folder)
    return cfg


def load_hf(folder, attn="sdpa"):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attn).eval()


# ----- the rows ----------------------------------------------------------------------

def trajectory(r, vocab, placeholder, total=None, scale=1.0):
    """Backward LAPO rows of one search-QA trajectory (cfpod.bench's shape, with scale x its
    lengths); with total, the observations stretched so the trajectory holds total tokens."""
    tok = lambda n: [r.randrange(vocab) for _ in range(max(1, n))]  # noqa: E731
    s = lambda n: max(1, int(n * scale))  # noqa: E731
    prompt = tok(s(240 + r.randrange(21)))
    nturns = 1 + r.randrange(3)
    acts = [s(55 + r.randrange(11)) for _ in range(nturns)]
    obs = [s(430 + r.randrange(41)) for _ in range(nturns)]
    if total:
        per = (total - len(prompt) - sum(acts)) // nturns
        obs = [per] * nturns
        obs[-1] += total - len(prompt) - sum(acts) - per * nturns
    turns = [tok(a) + tok(o) for a, o in zip(acts, obs)]
    template = tok(s(23 + r.randrange(5)))
    a = min(14, len(template) - 1)
    span = (a, min(len(template), a + 4 + r.randrange(4)))
    rows = [(prompt + sum(turns, []), template, span)]
    for k in range(nturns):
        ctx = list(prompt)
        for i, t in enumerate(turns):
            ctx += [placeholder] if i == k else t
        rows.append((ctx, template, span))
    return rows


def padded_count(rows):
    return len(rows) * max(len(c) + len(g) for c, g, _ in rows)


def common_prefix(rows):
    """The length of the prefix every row shares, short of each row's last context token
    (the first logit a row needs comes from it)."""
    seqs = [list(c) + list(g) for c, g, _ in rows]
    n = min(len(c) for c, _, _ in rows) - 1
    p = 0
    while p < n and all(s[p] == seqs[0][p] for s in seqs):
        p += 1
    return p


def prefix_cache_count(rows):
    p = common_prefix(rows)
    return p + sum(len(c) + len(g) - p for c, g, _ in rows)


def _scores(logits, rows, starts):
    """S per row from logits [R, L, V] where logits[i, starts[i] + k] predicts target[k]."""
    out = []
    for i, (_, tgt, (a, b)) in enumerate(rows):
        lp = torch.log_softmax(logits[i, starts[i] + a:starts[i] + b].double(), -1)
        t = torch.tensor(tgt[a:b], dtype=torch.long)
        out.append(float(lp.gather(1, t[:, None]).mean()))
    return out


@torch.inference_mode()
def hf_padded(model, rows):
    """All rows left-padded to the longest, one forward; logits only at the targets."""
    seqs = [list(c) + list(g) for c, g, _ in rows]
    L = max(len(s) for s in seqs)
    G = len(rows[0][1])
    if any(len(g) != G for _, g, _ in rows):
        raise ValueError("the padded baseline wants one target length per trajectory")
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s)
        mask[i, L - len(s):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=G + 1, use_cache=False)
    # logits[:, j] is position L - G - 1 + j: j = 0 predicts target[0].
    return _scores(out.logits, rows, [0] * len(rows)), len(seqs) * L


@torch.inference_mode()
def hf_prefix_cache(model, rows):
    """The common prefix once into a DynamicCache, then each row's suffix on it (the cache
    cropped back to the prefix after each row)."""
    from transformers import DynamicCache
    p = common_prefix(rows)
    seqs = [list(c) + list(g) for c, g, _ in rows]
    cache = DynamicCache(config=model.config)
    if p:
        model(input_ids=torch.tensor([seqs[0][:p]]), cache=cache, use_cache=True, logits_to_keep=1)
    scores, n = [], p
    for (ctx, tgt, span), s in zip(rows, seqs):
        suf = s[p:]
        G = len(tgt)
        if not p:
            cache = DynamicCache(config=model.config)
        out = model(input_ids=torch.tensor([suf]), cache=cache, use_cache=True,
                    position_ids=torch.arange(p, len(s))[None], logits_to_keep=G + 1)
        scores += _scores(out.logits, [(ctx, tgt, span)], [0])
        if p:
            cache.crop(-len(suf))  # back to the prefix
        n += len(suf)
    return scores, n


def pod_rows(m, rows, sdpa):
    """The pod's scores of rows and its tokens forwarded, with its attention on torch's SDPA
    (the pod's --attention sdpa) or on its float32 reference path (the CPU default)."""
    default = m.use_sdpa
    m.use_sdpa = sdpa
    try:
        s, u = m.score_rows(rows)
    finally:
        m.use_sdpa = default
    return s, u.tokens_forwarded


def time_lapo(m, hf, trajs, rounds=1):
    """Each method over the same rows, one trajectory at a time (the pod gets a trajectory's
    rows as one request; pod: its CPU default, the reference attention; pod_sdpa: torch's SDPA),
    each trajectory `rounds` times and its fastest time counted and in rotating order, so that a busy host's slow spells fall on all
    three alike: seconds, rows/s, tokens forwarded; scores compared with the pod's."""
    rows = sum(len(t) for t in trajs)
    warm = [(c[-48:], g, s) for c, g, s in trajs[0]]
    fns = {"pod": lambda t: pod_rows(m, t, False), "padded": lambda t: hf_padded(hf, t),
           "pod_sdpa": lambda t: pod_rows(m, t, True), "prefix_cache": lambda t: hf_prefix_cache(hf, t)}
    for f in fns.values():
        f(warm)
    names = list(fns)
    secs = {k: 0.0 for k in names}
    toks = {k: 0 for k in names}
    scores = {k: [] for k in names}
    for i, t in enumerate(trajs):
        best = {}
        for rnd in range(rounds):
            for j in range(len(names)):
                name = names[(i + j + rnd) % len(names)]
                t0 = time.perf_counter()
                sc, n = fns[name](t)
                best[name] = min(best.get(name, math.inf), time.perf_counter() - t0)
                if rnd == 0:
                    toks[name] += n
                    scores[name] += sc
        for name in names:
            secs[name] += best[name]
    out = {}
    for name in names:
        dt = secs[name]
        out[name] = {"seconds": round(dt, 3), "rows_per_second": round(rows / dt, 3), "tokens_forwarded": toks[name]}
        if name != "pod":
            d = max(abs(x - y) for x, y in zip(scores["pod"], scores[name]))
            out[name]["max_abs_score_diff_vs_pod"] = float(f"{d:.3g}")
        print(f"  {name}: {rows} rows in {dt:.2f} s = {rows / dt:.2f} rows/s, {toks[name]} tokens forwarded", flush=True)
    res = {"trajectories": len(trajs), "rows": rows, "rounds": rounds,
           "tokens_per_trajectory": round(sum(len(t[0][0]) + len(t[0][1]) for t in trajs) / len(trajs)),
           **out,
           "speedup_vs_padded": {p: round(out[p]["rows_per_second"] / out["padded"]["rows_per_second"], 2)
                                 for p in ("pod", "pod_sdpa")},
           "speedup_vs_prefix_cache": {p: round(out[p]["rows_per_second"] / out["prefix_cache"]["rows_per_second"], 2)
                                       for p in ("pod", "pod_sdpa")},
           "tokens_ratio_padded": round(out["padded"]["tokens_forwarded"] / out["pod"]["tokens_forwarded"], 3),
           "tokens_ratio_prefix_cache": round(out["prefix_cache"]["tokens_forwarded"] / out["pod"]["tokens_forwarded"], 3)}
    return res


# ----- AttnSR capture ------------------------------------------------------------------

def capture_steps(n):
    """Steps of 40 action + 160 observation tokens after a 200-token prompt (cfpod.bench's)."""
    steps, pos = [], 200
    while pos + 200 <= n:
        steps.append(((pos, pos + 40), (pos + 40, pos + 200)))
        pos += 200
    return steps


def fold_attentions(attentions, steps, layers):
    """docs/method.md §3.1 from full attention probabilities [1, H, N, N] per layer: for every
    query token inside step j's action, the probabilities summed over step k's action and
    observation keys, averaged over the step's query tokens and all heads."""
    K = len(steps)
    N = attentions[0].shape[-1]
    seg = torch.full((N,), 2 * K, dtype=torch.long)
    qpos, qstep = [], []
    for k, (a, o) in enumerate(steps):
        seg[a[0]:a[1]] = k
        seg[o[0]:o[1]] = K + k
        qpos += range(a[0], a[1])
        qstep += [k] * (a[1] - a[0])
    seg_m = torch.nn.functional.one_hot(seg, 2 * K + 1)[:, :2 * K].double()
    sel = torch.nn.functional.one_hot(torch.tensor(qstep), K).double().T  # [K, Q]
    H = attentions[0].shape[1]
    counts = torch.tensor([(a[1] - a[0]) * H for a, _ in steps], dtype=torch.float64)
    tri = torch.tril(torch.ones(K, K, dtype=torch.float64), -1)
    out = []
    for li in layers:
        p = attentions[li][0][:, qpos].sum(0, dtype=torch.float64)  # [Q, N]
        acc = (sel @ p @ seg_m) / counts[:, None]
        out.append((li, (acc[:, :K] * tri).tolist(), (acc[:, K:] * tri).tolist()))
    return out


def _status_mib(field):
    """VmRSS (now) or VmHWM (the peak) of this process from /proc/self/status, in MiB. The
    peak is this program's own: getrusage's ru_maxrss would carry the forking parent's
    resident size over the exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def capture_one(method, folder, n, seed, threads):
    """One capture in this process: {"seconds", "peak_rss_mib", "rss_before_mib", "graphs"}."""
    if threads:
        torch.set_num_threads(threads)
    r = random.Random(seed)
    steps = capture_steps(n)
    if method == "pod":
        from .model import Model
        m = Model.load(folder)
        layers = list(range(m.cfg.layers))
        toks = [r.randrange(m.cfg.vocab) for _ in range(n)]
        m.step_graphs(toks[:400], capture_steps(400), layers)  # warm-up
        before = _status_mib("VmRSS")
        t0 = time.perf_counter()
        graphs = m.step_graphs(toks, steps, layers)
    else:
        hf = load_hf(folder, attn="eager")
        layers = list(range(hf.config.num_hidden_layers))
        toks = [r.randrange(hf.config.vocab_size) for _ in range(n)]
        with torch.inference_mode():
            hf(input_ids=torch.tensor([toks[:400]]), output_attentions=True, use_cache=False, logits_to_keep=1)
        before = _status_mib("VmRSS")
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = hf(input_ids=torch.tensor([toks]), output_attentions=True, use_cache=False, logits_to_keep=1)
            graphs = fold_attentions(out.attentions, steps, layers)
    dt = time.perf_counter() - t0
    peak = _status_mib("VmHWM")
    return {"seconds": round(dt, 3), "peak_rss_mib": round(peak), "rss_before_mib": round(before),
            "graphs": graphs}


def run_capture(method, folder, n, seed, threads):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "cfpod.bench_hf", "--capture-one", method, folder, str(n), str(seed),
                        str(threads or 0)], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"capture {method} at {n} tokens failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def time_capture(folder, lengths, seed, threads):
    out = []
    for n in lengths:
        pod = run_capture("pod", folder, n, seed, threads)
        eager = run_capture("eager", folder, n, seed, threads)
        diff = 0.0
        for (_, aa, ao), (_, ea, eo) in zip(pod.pop("graphs"), eager.pop("graphs")):
            for x, y in ((aa, ea), (ao, eo)):
                diff = max([diff] + [abs(u - v) for ru, rv in zip(x, y) for u, v in zip(ru, rv)])
        item = {"tokens": n, "steps": len(capture_steps(n)), "pod": pod, "eager": eager,
                "speedup": round(eager["seconds"] / pod["seconds"], 2),
                "peak_rss_ratio": round(eager["peak_rss_mib"] / pod["peak_rss_mib"], 2),
                "extra_rss_mib": {"pod": pod["peak_rss_mib"] - pod["rss_before_mib"],
                                  "eager": eager["peak_rss_mib"] - eager["rss_before_mib"]},
                "max_abs_graph_diff": float(f"{diff:.3g}")}
        out.append(item)
        print(f"  AttnSR capture {n} tokens: pod {pod['seconds']} s, peak {pod['peak_rss_mib']} MiB; eager "
              f"{eager['seconds']} s, peak {eager['peak_rss_mib']} MiB; graphs differ by {diff:.2g}", flush=True)
    return out


# ----- the command -----------------------------------------------------------------------

def save(res, path):
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(path + ".tmp", path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--capture-one"]:
        method, folder, n, seed, threads = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        print(json.dumps(capture_one(method, folder, n, seed, threads)))
        return None
    p = argparse.ArgumentParser(prog="cfpod.bench --vs-transformers", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2, help="Qwen2.5-0.5B's 24 layers cut to this many")
    p.add_argument("--size", choices=("0.5b", "tiny"), default="0.5b",
                   help="tiny: a few-million-parameter model of the same structure, for tests")
    p.add_argument("--search-qa-trajectories", type=int, default=6)
    p.add_argument("--8k-trajectories", dest="long_trajectories", type=int, default=2)
    p.add_argument("--long-tokens", type=int, default=8192, help="tokens of a trajectory of the long shape")
    p.add_argument("--scale", type=float, default=1.0, help="search-QA lengths times this (tests)")
    p.add_argument("--capture-lengths", default="4096,8192")
    p.add_argument("--capture-layers", type=int, default=1,
                   help="layers of the capture model (eager attention holds heads x N x N floats per layer)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every method this many times on each trajectory and count the fastest")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model-dir", help="keep the saved models here (default: a temporary folder)")
    p.add_argument("--json", action="store_true", help="print every number as one JSON line at the end")
    p.add_argument("--out", help="write the numbers to this JSON file")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    import transformers

    from .devinfo import full_float32
    from .model import Model
    full_float32()
    hf_config = QWEN25_05B if a.size == "0.5b" else TINY
    res = {"device": "cpu", "dtype": "float32", "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "model": "Qwen2.5-0.5B-Instruct config" if a.size == "0.5b" else "tiny",
           "layers": a.layers, "capture_layers": a.capture_layers,
           "goal": {"speedup_vs_padded": 2.0, "speedup_vs_prefix_cache": 1.2}}
    with tempfile.TemporaryDirectory() as tmp:
        base = a.model_dir or tmp
        folder = os.path.join(base, f"lapo-{a.size}-{a.layers}")
        if not os.path.exists(os.path.join(folder, "config.json")):
            save_model(folder, hf_config, a.layers, a.seed)
        m = Model.load(folder)
        hf = load_hf(folder)
        print(f"model: {res['model']}, {a.layers} layers, {torch.get_num_threads()} threads", flush=True)
        r = random.Random(a.seed)
        V = hf_config["vocab_size"]
        ph = V - 1
        shapes = {"search_qa": [trajectory(r, V - 1, ph, scale=a.scale) for _ in range(a.search_qa_trajectories)],
                  "8k": [trajectory(r, V - 1, ph, total=a.long_tokens, scale=a.scale)
                         for _ in range(a.long_trajectories)]}
        for name, trajs in shapes.items():
            if not trajs:
                continue
            print(f"LAPO {name}:", flush=True)
            res["lapo_" + name] = time_lapo(m, hf, trajs, a.rounds)
            save(res, a.out)
        del m, hf
        lengths = [int(x) for x in a.capture_lengths.split(",") if x]
        if lengths:
            cfolder = os.path.join(base, f"capture-{a.size}-{a.capture_layers}")
            if not os.path.exists(os.path.join(cfolder, "config.json")):
                save_model(cfolder, hf_config, a.capture_layers, a.seed)
            res["attnsr_capture"] = time_capture(cfolder, lengths, a.seed, a.threads)
    save(res, a.out)
    if a.json:
        print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
