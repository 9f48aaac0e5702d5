"""python3 -m creditflow announce|policy|decode ...: small command-line helpers.

  announce --brokers HOST:PORT --version N [--checkpoint PATH] [--topic creditflow.policy]
  policy   --brokers HOST:PORT [--topic creditflow.policy]      newest announced version (JSON)
  decode   FILE|-                                               a framed record as JSON
"""

import argparse
import json
import sys

import numpy as np


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (bytes, memoryview)):
        return bytes(x).hex()
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m creditflow", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("announce", help="announce a policy version")
    a.add_argument("--brokers", required=True)
    a.add_argument("--version", type=int, required=True)
    a.add_argument("--checkpoint", default="")
    a.add_argument("--topic", default="creditflow.policy")
    p = sub.add_parser("policy", help="print the newest announced policy version")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", default="creditflow.policy")
    d = sub.add_parser("decode", help="print a framed record (any creditflow schema) as JSON")
    d.add_argument("file", nargs="?", default="-")
    args = ap.parse_args(argv)
    if args.cmd == "announce":
        from .kafka import announce_policy
        announce_policy(args.brokers, args.version, args.checkpoint, topic=args.topic)
        print(json.dumps({"announced": args.version, "checkpoint": args.checkpoint}))
        return 0
    if args.cmd == "policy":
        from .kafka import PolicyWatcher
        w = PolicyWatcher(args.brokers, topic=args.topic)
        ok = w.catch_up(10)
        print(json.dumps({"version": w.version, "checkpoint": w.checkpoint, "complete": ok}))
        w.close()
        return 0
    from . import wire
    data = sys.stdin.buffer.read() if args.file == "-" else open(args.file, "rb").read()
    name = wire.schema_of(data)
    dec = {"io.creditflow.v1.Sample": wire.decode_sample, "io.creditflow.v1.Trajectory": wire.decode_trajectory,
           "io.creditflow.v1.Scored": wire.decode_scored, "io.creditflow.v1.PolicyAnnouncement": wire.decode_policy,
           "io.creditflow.v1.DeadLetter": wire.decode_dead_letter}.get(name)
    if dec is None:
        print("not a creditflow record (unknown fingerprint)", file=sys.stderr)
        return 1
    print(json.dumps({"schema": name, "record": _jsonable(dec(data))}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
