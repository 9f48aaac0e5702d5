#!/usr/bin/env python3
"""Decode one creditflow Sample record and print it as JSON.

Usage:
  read_sample.py [FILE]     (default: stdin)

Reuse decode_sample() with any Kafka client, e.g. on each message of a
confluent_kafka.Consumer subscribed to "samples": decode_sample(msg.value()).
"""

import json
import sys

from creditflow_wire import SchemaCodec, unpack_f32, unpack_i32

SAMPLE = SchemaCodec("sample.avsc")


def decode_sample(data: bytes) -> dict:
    """Decode framed Sample bytes into plain Python values.

    Packed fields become lists: tokens ([int]), loss_mask ([0|1]),
    advantages / token_rewards / rollout_logprobs ([float] or None).
    Raises ValueError starting with "unknown_schema" or "undecodable".
    """
    d = SAMPLE.decode(data)
    d["tokens"] = unpack_i32(d["tokens"])
    d["loss_mask"] = list(d["loss_mask"])
    for k in ("advantages", "token_rewards", "rollout_logprobs"):
        if d.get(k) is not None:
            d[k] = unpack_f32(d[k])
    n = len(d["tokens"])
    if len(d["loss_mask"]) != n:
        raise ValueError("invalid: %d loss-mask entries for %d tokens" % (len(d["loss_mask"]), n))
    return d


def main() -> int:
    if len(sys.argv) > 1:
        with open(sys.argv[1], "rb") as f:
            data = f.read()
    else:
        data = sys.stdin.buffer.read()
    json.dump(decode_sample(data), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
