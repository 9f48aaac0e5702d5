#!/usr/bin/env python3
"""A minimal rollout worker: publishes search-QA shaped groups with creditflow.RolloutPublisher.

Usage:
  rollout_worker.py --brokers HOST:PORT [--topic creditflow.trajectories] [--groups N]
                    [--group-size G] [--worker NAME] [--first-group K] [--policy-version V]
                    [--source NAME] [--seed S]

Tokens are bytes (ids 0..255), the tokenization of creditflow's built-in tiny model, so the
records are scored by `creditflow run` or `creditflow demo` without any model files. With a
real policy, pass its tokenizer as `tokenize` (a Hugging Face fast tokenizer's ids and
offset_mapping) and build_trajectory fills the gold target and span the same way.
Trajectory ids are NAME-qNNNNN-i, prompt ids NAME-qNNNNN. Prints one JSON line:
{"published": n, "trajectory_ids": [...]}.
Needs the creditflow package (pip install ./python, or run from the repository) and
Debian's python3-confluent-kafka and python3-numpy.
"""

import argparse
import json
import random
import sys

try:
    import creditflow
except ImportError:
    raise SystemExit("the creditflow package is not installed: pip install ./python (from the repository root), "
                     "or run with PYTHONPATH=python")

WORDS = ["oslo", "kyoto", "lisbon", "hypatia", "grace hopper", "the gobi", "patagonia"]


def tokens(text):
    return creditflow.byte_tokenizer(text)[0]


def trajectory(worker, group, index, group_size, policy_version, source, rng):
    gold = WORDS[group % len(WORDS)]
    turns = []
    for _ in range(rng.randint(1, 3)):
        obs = " ".join(rng.choice(WORDS) for _ in range(30))
        if rng.random() < 0.4:
            obs += " " + gold
        turns.append(("search", tokens("<search>%s</search>" % rng.choice(WORDS)),
                      tokens("<information>%s</information>" % obs)))
    pred = gold if rng.random() < 0.5 else rng.choice(WORDS)
    turns.append(("answer", tokens("<answer>%s</answer>" % pred)))
    n_policy = sum(len(t[1]) for t in turns)
    return creditflow.build_trajectory(
        trajectory_id="%s-q%05d-%d" % (worker, group, index), prompt_id="%s-q%05d" % (worker, group),
        group_size=group_size, sample_index=index, policy_version=policy_version,
        prompt_ids=tokens("Question %d: which name fits? " % group), turns=turns,
        pred_answer=pred, gold_answers=[gold], tokenize=creditflow.byte_tokenizer,
        rollout_logprobs=[-rng.random() for _ in range(n_policy)], temperature=1.0, source=source)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="creditflow.trajectories")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=5)
    ap.add_argument("--first-group", type=int, default=0)
    ap.add_argument("--worker", default="py")
    ap.add_argument("--policy-version", type=int, default=1)
    ap.add_argument("--source", default=None)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random("%s/%d" % (args.worker, args.seed))
    ids = []
    with creditflow.RolloutPublisher(args.brokers, topic=args.topic) as pub:
        for g in range(args.first_group, args.first_group + args.groups):
            for i in range(args.group_size):
                t = trajectory(args.worker, g, i, args.group_size, args.policy_version, args.source, rng)
                pub.publish(t)
                ids.append(t["trajectory_id"])
        pub.flush(60)
    print(json.dumps({"published": len(ids), "trajectory_ids": ids}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
