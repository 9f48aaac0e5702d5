"""Scoring time of one long trajectory's LAPO backward rows on a randomly initialized model:

    python3 -m cfpod.longrows --tokens 32768 --turns 30 --layers 2 --attention sdpa --json

The trajectory is a prompt and --turns turns of action and observation tokens, --tokens in
all with the gold template (within the model's 32,768-token window); its backward rows (docs/method.md §2.1) are the full context and one context per turn
with that turn replaced by the placeholder, each followed by a gold template of 25 tokens.
The model has Qwen2.5-0.5B's shape (hidden 896, 14 query and 2 key/value heads of 64,
vocabulary 151,936, tied) cut to --layers layers. The rows are scored once as the pod
scores them (prefix sharing with --packing, attention with --attention) after a warm-up on
a short trajectory; the last line with --json holds every number: seconds, rows, the
tokens forwarded and the tokens a row-by-row computation would forward.
"""

import argparse
import json
import random
import time

import torch

from .bench import SIZES
from .devinfo import full_float32
from .model import Config, Model, dtype_from_name


def trajectory(r, tokens, turns, vocab, placeholder):
    """Backward rows (context, template, span) of one trajectory of about `tokens` context
    tokens: a prompt of 1/20 of them, then turns of 1/8 action and 7/8 observation."""
    prompt_n = max(1, tokens // 20)
    per_turn = max(2, (tokens - prompt_n) // turns)
    tok = lambda n: [r.randrange(vocab) for _ in range(n)]  # noqa: E731
    prompt = tok(prompt_n)
    ts = [tok(max(1, per_turn // 8)) + tok(per_turn - max(1, per_turn // 8)) for _ in range(turns)]
    template, span = tok(25), (14, 20)
    rows = [(prompt + sum(ts, []), template, span)]
    for k in range(turns):
        ctx = list(prompt)
        for i, t in enumerate(ts):
            ctx += [placeholder] if i == k else t
        rows.append((ctx, template, span))
    return rows


def work(rows):
    """(tokens forwarded, query-key pairs attended) of scoring rows with prefix sharing: each
    row forwards what follows its longest common prefix with an earlier row (the template
    included), a token at position i attends to i + 1 keys in every layer."""
    seqs = [list(c) + list(g) for c, g, _ in rows]
    tokens = pairs = 0
    for j, s in enumerate(seqs):
        lcp = 0
        for e in seqs[:j]:
            n = 0
            for x, y in zip(s, e):
                if x != y:
                    break
                n += 1
            lcp = max(lcp, n)
        tokens += len(s) - lcp
        pairs += sum(range(lcp + 1, len(s) + 1))
    return tokens, pairs


def main(argv=None):
    p = argparse.ArgumentParser(prog="cfpod.longrows", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--size", default="0.5b", choices=sorted(SIZES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "reference"])
    p.add_argument("--packing", default="walk", choices=["walk", "tree"])
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="end with one JSON line of every number")
    p.add_argument("--work-only", action="store_true",
                   help="only the tokens forwarded and query-key pairs attended (no model; seconds)")
    a = p.parse_args(argv)
    if a.work_only:
        rows = trajectory(random.Random(a.seed), a.tokens - 25, a.turns, 151935, 151935)
        tokens, pairs = work(rows)
        res = {"tokens": a.tokens, "turns": a.turns, "rows": len(rows), "tokens_forwarded": tokens,
               "attention_pairs": pairs}
        print(json.dumps(res))
        return res
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    full_float32()
    h = dict(SIZES[a.size], num_hidden_layers=a.layers)
    cfg = Config(h)
    m = Model.random(cfg, seed=a.seed, device=a.device, dtype=dtype_from_name(a.dtype))
    m.set_attention(a.attention)
    m.packing = a.packing
    r = random.Random(a.seed)
    ph = cfg.vocab - 1
    m.score_rows(trajectory(r, 1024, 4, cfg.vocab - 1, ph))  # warm-up
    rows = trajectory(r, a.tokens - 25, a.turns, cfg.vocab - 1, ph)  # the template fills the --tokens
    t0 = time.perf_counter()
    scores, usage = m.score_rows(rows)
    secs = time.perf_counter() - t0
    res = {"tokens": a.tokens, "turns": a.turns, "layers": a.layers, "size": a.size, "device": a.device,
           "dtype": a.dtype, "attention": a.attention, "packing": a.packing, "threads": torch.get_num_threads(),
           "torch": torch.__version__, "rows": len(rows), "seconds": round(secs, 2),
           "tokens_forwarded": usage.tokens_forwarded, "tokens_row_by_row": usage.tokens_row_by_row,
           "attention_pairs": work(rows)[1], "finite": all(s == s for s in scores)}
    print(f"{len(rows)} backward rows of a {a.tokens}-token, {a.turns}-turn trajectory on {a.size} cut to "
          f"{a.layers} layers ({a.attention}, {a.packing}, {res['threads']} threads): {secs:.1f} s, "
          f"{usage.tokens_forwarded} tokens forwarded ({usage.tokens_row_by_row} row by row)", flush=True)
    if a.json:
        print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
