#!/usr/bin/env python3
"""Write one creditflow Trajectory record in the wire format.

Usage:
  produce_trajectory.py [--json FILE|-] [--out FILE]

Without --json an example trajectory is written. With --json, FILE holds one
JSON object with the fields of encode_trajectory's argument. The framed bytes
go to --out or to stdout. Reuse encode_trajectory() with any Kafka client,
e.g. with confluent_kafka.Producer({..., "partitioner": "murmur2_random"}) (the
Java client's partitioner, the one creditflow uses):
produce(topic="creditflow.trajectories", key=d["prompt_id"],
value=encode_trajectory(d), headers={"creditflow-schema": "io.creditflow.v1.Trajectory"}).
"""

import argparse
import json
import sys

from creditflow_wire import SchemaCodec, pack_f32, pack_i32

TRAJECTORY = SchemaCodec("trajectory.avsc")


def encode_trajectory(d: dict) -> bytes:
    """Encode a trajectory given as plain Python values.

    Keys: trajectory_id, prompt_id (str); group_size, sample_index,
    policy_version, created_at_ms (int); prompt ([int]); turns
    ([{"kind": str, "action": [int], "observation": [int]}]); optional:
    reward (float or None), pred_answer (str or None), gold_answers ([str]),
    gold_target ([int]), gold_span ([a, b]), rollout_logprobs ([float] or
    None, one per action token over all turns), temperature (float or None),
    source (str or None: data source / task name).
    """
    span = d.get("gold_span") or [0, 0]
    logprobs = d.get("rollout_logprobs")
    datum = {
        "trajectory_id": d["trajectory_id"],
        "prompt_id": d["prompt_id"],
        "group_size": int(d["group_size"]),
        "sample_index": int(d.get("sample_index", 0)),
        "policy_version": int(d.get("policy_version", 0)),
        "created_at_ms": int(d.get("created_at_ms", 0)),
        "prompt": pack_i32(d["prompt"]),
        "turns": [
            {
                "kind": t["kind"],
                "action": pack_i32(t["action"]),
                "observation": pack_i32(t.get("observation") or []),
            }
            for t in d["turns"]
        ],
        "reward": None if d.get("reward") is None else float(d["reward"]),
        "pred_answer": d.get("pred_answer"),
        "gold_answers": list(d.get("gold_answers") or []),
        "gold_target": pack_i32(d.get("gold_target") or []),
        "gold_span_start": int(span[0]),
        "gold_span_end": int(span[1]),
        "rollout_logprobs": None if logprobs is None else pack_f32(logprobs),
        "temperature": None if d.get("temperature") is None else float(d["temperature"]),
        "source": d.get("source"),
    }
    return TRAJECTORY.encode(datum)


EXAMPLE = {
    "trajectory_id": "py-traj-1",
    "prompt_id": "py-prompt-1",
    "group_size": 5,
    "sample_index": 0,
    "policy_version": 7,
    "created_at_ms": 1764500000000,
    "prompt": [101, 102, 103, 104],
    "turns": [
        {"kind": "search", "action": [11, 12, 13], "observation": [21, 22, 23, 24]},
        {"kind": "answer", "action": [31, 32]},
    ],
    "reward": None,
    "pred_answer": "Paris",
    "gold_answers": ["Paris", "City of Paris"],
    "gold_target": [40, 41, 42, 43, 44],
    "gold_span": [2, 4],
    "rollout_logprobs": [-0.5, -0.25, -1.0, -0.125, -2.0],
    "temperature": 1.0,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="JSON file with the trajectory ('-' for stdin)")
    ap.add_argument("--out", help="output file (default: stdout)")
    args = ap.parse_args()
    d = EXAMPLE
    if args.json == "-":
        d = json.load(sys.stdin)
    elif args.json:
        with open(args.json) as f:
            d = json.load(f)
    data = encode_trajectory(d)
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
