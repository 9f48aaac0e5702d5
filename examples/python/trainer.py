#!/usr/bin/env python3
"""A minimal trainer-side consumer: reads creditflow samples and checks them.

Usage:
  trainer.py --brokers HOST:PORT --expect N [--topic creditflow.samples] [--group trainer] [--timeout 120]

Deduplicates by trajectory_id (after a processor crash a sample can arrive
twice; copies are byte-identical), checks what a trainer relies on (aligned
lengths, 0/1 loss mask, finite advantages, zero advantage off the policy
tokens) and prints one JSON summary line. Samples too large for one Kafka
message arrive as chunks and are put back together (creditflow_chunks.py). Exit status 0 when N distinct valid
samples were read. Needs python3-confluent-kafka and python3-avro.
"""

import argparse
import json
import math
import time

from confluent_kafka import Consumer, TopicPartition

from creditflow_chunks import Reassembler
from read_sample import decode_sample


def check(s: dict) -> None:
    n = len(s["tokens"])
    if n == 0 or len(s["loss_mask"]) != n:
        raise ValueError("lengths")
    adv = s.get("advantages") or []
    if s["output"] != "token_rewards" and len(adv) != n:
        raise ValueError("%d advantages for %d tokens" % (len(adv), n))
    for i, a in enumerate(adv):
        if not math.isfinite(a) or (s["loss_mask"][i] == 0 and a != 0):
            raise ValueError("advantage %r at %d" % (a, i))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="creditflow.samples")
    ap.add_argument("--group", default="trainer")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    c = Consumer({"bootstrap.servers": args.brokers, "group.id": args.group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([args.topic])
    seen, dups, invalid, policy_tokens = {}, 0, 0, 0
    chunks = Reassembler()
    deadline = time.time() + args.timeout
    while len(seen) < args.expect and time.time() < deadline:
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        rec, broken = chunks.add(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or [])
        for b in broken:
            invalid += 1
            print("broken chunked sample at offset %d: %s %s" % (b["offset"], b["reason"], b["detail"]))
        if rec is None:
            continue
        s = decode_sample(rec["value"])
        try:
            check(s)
        except ValueError as e:
            invalid += 1
            print("invalid sample %s: %s" % (s["trajectory_id"], e))
            continue
        if s["trajectory_id"] in seen:
            dups += 1
        else:
            seen[s["trajectory_id"]] = s
            policy_tokens += sum(s["loss_mask"])
        # Never commit past the first chunk of a sample still being put together.
        nxt = chunks.commit_offset(msg.partition(), msg.offset() + 1)
        c.commit(offsets=[TopicPartition(msg.topic(), msg.partition(), nxt)], asynchronous=False)
    c.close()
    print(json.dumps({"samples": len(seen), "duplicates": dups, "invalid": invalid, "policy_tokens": policy_tokens}))
    return 0 if len(seen) >= args.expect and invalid == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
