"""Records larger than one Kafka message (docs/wire-format.md, "Records
larger than one message").

creditflow writes a record that does not fit one message as chunk messages
with the record's key (so one partition, in order), each holding a slice of
the value and the headers

    creditflow-chunk        b"<index>/<count>"
    creditflow-chunk-of     lowercase hex SHA-256 of the whole value
    creditflow-chunk-bytes  the whole value's length, decimal

plus the record's own headers. Records that fit are plain single messages.

`Reassembler` puts chunked records back together for a consumer and `split`
cuts a value for a producer (both are the creditflow package's, python/creditflow/chunks.py);
`produce` writes a record with confluent-kafka.
As a script it reads a topic from the start to its end and prints one JSON
line per whole record, or writes a file as one record (used by the Go tests):

    python3 creditflow_chunks.py --brokers 127.0.0.1:9092 --topic creditflow.samples
    python3 creditflow_chunks.py --brokers 127.0.0.1:9092 --topic creditflow.trajectories \
        --produce trajectory.bin --key prompt-1

Needs the creditflow package (python/, found from a repository checkout by
itself; numpy) and, for the script mode and `produce`, confluent-kafka.
"""

import argparse
import hashlib
import json
import sys

try:
    from creditflow.chunks import CHUNK, CHUNK_BYTES, CHUNK_OF, DEFAULT_CHUNK_BYTES, Reassembler, split
except ImportError:
    raise SystemExit("the creditflow package is not installed: pip install ./python (from the repository root), "
                     "or run with PYTHONPATH=python")

__all__ = ["CHUNK", "CHUNK_OF", "CHUNK_BYTES", "DEFAULT_CHUNK_BYTES", "Reassembler", "split", "produce"]


def produce(brokers: str, topic: str, key: bytes, value: bytes, headers=()) -> int:
    """Writes one record, as chunks when it is larger than one message.
    Returns the number of messages written."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "acks": "all", "partitioner": "murmur2_random",
                  "compression.type": "lz4"})
    msgs = split(key, value, headers) if len(value) > 900_000 else [(key, value, list(headers))]
    for k, v, hs in msgs:
        p.produce(topic, key=k, value=v, headers=hs)
    if p.flush(30) != 0:
        raise RuntimeError("not every chunk was acknowledged: produce the record again")
    return len(msgs)


def main() -> int:
    from confluent_kafka import Consumer, TopicPartition

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--produce", metavar="FILE", help="write FILE's bytes as one record (chunked when large) instead of reading")
    ap.add_argument("--key", default="")
    args = ap.parse_args()
    if args.produce:
        with open(args.produce, "rb") as f:
            n = produce(args.brokers, args.topic, args.key.encode(), f.read())
        print(json.dumps({"messages": n}))
        return 0
    c = Consumer({"bootstrap.servers": args.brokers, "group.id": "creditflow-chunks", "enable.auto.commit": False})
    _, end = c.get_watermark_offsets(TopicPartition(args.topic, args.partition), timeout=10)
    c.assign([TopicPartition(args.topic, args.partition, 0)])
    r = Reassembler()
    offset = 0
    while offset < end:
        msg = c.poll(5)
        if msg is None:
            print("timed out at offset %d of %d" % (offset, end), file=sys.stderr)
            return 1
        if msg.error():
            continue
        offset = msg.offset() + 1
        rec, broken = r.add(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or [])
        for b in broken:
            print(json.dumps({"broken": b["reason"], "offset": b["offset"]}))
        if rec is not None:
            print(json.dumps({"offset": rec["offset"], "key": (rec["key"] or b"").decode(),
                              "bytes": len(rec["value"]), "sha256": hashlib.sha256(rec["value"]).hexdigest(),
                              "headers": [k for k, _ in rec["headers"]]}))
    c.close()
    print(json.dumps({"stray": r.stray}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
