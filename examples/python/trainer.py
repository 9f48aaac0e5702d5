#!/usr/bin/env python3
"""A minimal trainer-side reader: creditflow.SampleStream, checks, and a JSON summary.

Usage:
  trainer.py --brokers HOST:PORT --expect N [--topic creditflow.samples] [--group trainer]
             [--timeout 120] [--batch 8] [--max-policy-lag L] [--out FILE]

Reads whole groups in batches (SampleStream.batches), turns each batch into padded and
packed numpy arrays (to_numpy), checks what a trainer relies on (aligned lengths, 0/1 loss
mask, finite advantages, zero advantage off the policy tokens), commits after each "step",
and prints one JSON summary line: samples, duplicates, stale, invalid, policy_tokens.
--out writes one JSON line per sample as it arrives (trajectory_id, policy versions,
advantages or token rewards). Exit status 0 when N distinct valid samples were read.
Needs the creditflow package and Debian's python3-confluent-kafka and python3-numpy.
"""

import argparse
import json
import sys
import time

import numpy as np

try:
    import creditflow
except ImportError:
    raise SystemExit("the creditflow package is not installed: pip install ./python (from the repository root), "
                     "or run with PYTHONPATH=python")


def check(s):
    n = s["tokens"].size
    if n == 0 or s["loss_mask"].size != n:
        raise ValueError("lengths")
    if not np.isin(s["loss_mask"], (0, 1)).all():
        raise ValueError("loss mask is not 0/1")
    per_token = s["advantages"] if s["output"] != "token_rewards" else s["token_rewards"]
    if per_token is None or per_token.size != n:
        raise ValueError("per-token %s missing or misaligned" % s["output"])
    if not np.isfinite(per_token).all():
        raise ValueError("non-finite %s" % s["output"])
    if s["output"] != "token_rewards" and (per_token[s["loss_mask"] == 0] != 0).any():
        raise ValueError("advantage off the policy tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="creditflow.samples")
    ap.add_argument("--group", default="trainer")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-policy-lag", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = open(args.out, "w") if args.out else None
    stream = creditflow.SampleStream(args.brokers, args.group, topic=args.topic, max_policy_lag=args.max_policy_lag,
                                     idle_timeout=args.timeout, group_timeout=10)
    seen, counts = set(), {"invalid": 0, "policy_tokens": 0}
    deadline = time.time() + args.timeout
    interrupted = False
    try:
        train(args, stream, out, seen, counts, deadline)
    except KeyboardInterrupt:  # Ctrl-C: stop like a finished run, without a traceback
        interrupted = True
    stream.close()
    print(json.dumps({"samples": len(seen), "duplicates": stream.duplicates, "stale": stream.stale,
                      "invalid": counts["invalid"], "policy_tokens": counts["policy_tokens"],
                      "interrupted": interrupted}))
    if interrupted:
        return 130
    return 0 if len(seen) >= args.expect and counts["invalid"] == 0 else 1


def train(args, stream, out, seen, counts, deadline):
    """The training loop: counts invalid samples and policy tokens into counts."""
    for batch in stream.batches(args.batch, max_wait=2):
        arrays = creditflow.to_numpy(batch)             # padded [B, L]
        packed = creditflow.to_numpy(batch, packed=True)  # [1, T] + cu_seqlens
        assert packed["cu_seqlens"][-1] == arrays["attention_mask"].sum()
        for s in batch:
            try:
                check(s)
            except ValueError as e:
                counts["invalid"] += 1
                print("invalid sample %s: %s" % (s["trajectory_id"], e), file=sys.stderr)
                continue
            seen.add(s["trajectory_id"])
            counts["policy_tokens"] += int(s["loss_mask"].sum())
            if out:
                per_token = s["advantages"] if s["output"] != "token_rewards" else s["token_rewards"]
                out.write(json.dumps({"trajectory_id": s["trajectory_id"], "prompt_id": s["prompt_id"],
                                      "policy_version": s["policy_version"],
                                      "scorer_policy_version": s["scorer_policy_version"],
                                      "source": s["source"], "output": s["output"],
                                      "per_token": per_token.tolist(), "loss_mask": s["loss_mask"].tolist()}) + "\n")
                out.flush()
        stream.commit()  # after the training step: at-least-once
        if len(seen) >= args.expect or time.time() > deadline:
            break


if __name__ == "__main__":
    sys.exit(main())
