#!/usr/bin/env python3
"""A minimal rollout worker: publishes search-QA shaped trajectories to Kafka.

Usage:
  rollout_worker.py --brokers HOST:PORT [--topic creditflow.trajectories] [--groups N] [--group-size G]

Tokens are bytes (ids 0..255), the tokenization of creditflow's built-in tiny
model, so the records are scored by `creditflow run` or `creditflow demo`
without any model files. With a real policy, tokenize with its tokenizer and
send the gold target ids and span exactly like this (docs/method.md §2.1).
Needs Debian's python3-confluent-kafka and python3-avro.
"""

import argparse
import random
import time

from confluent_kafka import Producer

from produce_trajectory import encode_trajectory

TEMPLATE = "<think>Now there's enough information to answer</think>\n<answer>{}</answer>"
WORDS = ["oslo", "kyoto", "lisbon", "hypatia", "grace hopper", "the gobi", "patagonia"]


def tokens(text: str) -> list:
    return list(text.encode("utf-8"))


def trajectory(group: int, index: int, group_size: int, rng: random.Random) -> dict:
    gold = WORDS[group % len(WORDS)]
    target = TEMPLATE.format(gold)
    a = target.index("<answer>") + len("<answer>")
    turns = []
    for s in range(rng.randint(1, 3)):
        obs = " ".join(rng.choice(WORDS) for _ in range(30))
        if rng.random() < 0.4:
            obs += " " + gold
        turns.append({"kind": "search", "action": tokens("<search>%s</search>" % rng.choice(WORDS)),
                      "observation": tokens("<information>%s</information>" % obs)})
    pred = gold if rng.random() < 0.5 else rng.choice(WORDS)
    turns.append({"kind": "answer", "action": tokens("<answer>%s</answer>" % pred)})
    n_policy = sum(len(t["action"]) for t in turns)
    return {
        "trajectory_id": "py-q%05d-%d" % (group, index),
        "prompt_id": "py-q%05d" % group,
        "group_size": group_size,
        "sample_index": index,
        "policy_version": 1,
        "created_at_ms": int(time.time() * 1000),
        "prompt": tokens("Question %d: which name fits? " % group),
        "turns": turns,
        "pred_answer": pred,
        "gold_answers": [gold],
        "gold_target": tokens(target),
        "gold_span": [a, a + len(gold.encode("utf-8"))],
        "rollout_logprobs": [-rng.random() for _ in range(n_policy)],
        "temperature": 1.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="creditflow.trajectories")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    # murmur2_random is the Java client's partitioner: a group's members land where creditflow expects them.
    p = Producer({"bootstrap.servers": args.brokers, "partitioner": "murmur2_random", "acks": "all"})
    errors = []
    for g in range(args.groups):
        for i in range(args.group_size):
            d = trajectory(g, i, args.group_size, rng)
            p.produce(args.topic, key=d["prompt_id"], value=encode_trajectory(d),
                      headers={"creditflow-schema": "io.creditflow.v1.Trajectory"},
                      on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    p.flush(30)
    if errors:
        print("delivery failed:", errors[0])
        return 1
    print("produced %d trajectories" % (args.groups * args.group_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
