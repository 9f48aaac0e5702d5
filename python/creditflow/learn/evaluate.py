"""The held-out evaluation of the training loop (docs/learn.md, "Held-out evaluation").

usage: python3 -m creditflow.learn.evaluate --brokers B --init DIR [--env searchqa|household]
           [--episodes N] [--eval-seed S] [--until-version V]

Evaluates version 0 (the --init checkpoint), then follows the policy topic (PolicyWatcher) and
evaluates every announced version, in order, from its checkpoint folder: the same held-out
episodes (seeds 3,000,000,000 and up, which the workers never play) with fixed decoding
(sampling at temperature 1 from a generator seeded with --eval-seed for every version), so that
versions differ only by their weights. It runs beside the trainer and never holds it up. One
JSON line per version: {"event": "eval", "policy_version", "success_rate", "reward_mean",
"found_rate", "seconds"}. It ends after --until-version, or on SIGTERM.
"""

import argparse
import json
import signal
import sys
import time

import torch

from .. import envs as E
from .. import policy as P
from ..kafka import PolicyWatcher
from . import rollout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--policy-topic", default="creditflow.policy")
    ap.add_argument("--init", required=True)
    ap.add_argument("--env", default="searchqa", choices=sorted(E.ENVS))
    ap.add_argument("--episodes", type=int, default=128)
    ap.add_argument("--eval-seed", type=int, default=7)
    ap.add_argument("--until-version", type=int, default=None)
    a = ap.parse_args(argv)
    rollout.setup_torch()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    env = E.make_env(a.env)
    seeds = list(range(3_000_000_000, 3_000_000_000 + a.episodes))
    t0 = time.monotonic()
    checkpoints = {0: a.init}
    watcher = PolicyWatcher(a.brokers, topic=a.policy_topic,
                            on_change=lambda ann: checkpoints.__setitem__(ann["version"], ann["checkpoint"])).start()
    version = 0
    try:
        while not stop:
            if version not in checkpoints:
                if a.until_version is not None and version > a.until_version:
                    break
                if watcher.version is not None and watcher.version > version:
                    version += 1  # a version announced without our seeing it (compacted away): skip it
                    continue
                time.sleep(0.1)
                continue
            t = time.monotonic()
            try:
                model = P.load(checkpoints[version])
            except (OSError, ValueError) as e:
                print(json.dumps({"event": "eval_failed", "policy_version": version, "error": str(e)}), file=sys.stderr)
                time.sleep(0.5)
                continue
            gen = torch.Generator().manual_seed(a.eval_seed)
            succ, reward, found = rollout.evaluate(model, env, seeds, generator=gen)
            print(json.dumps({"event": "eval", "policy_version": version, "success_rate": round(succ, 4),
                              "reward_mean": round(reward, 4), "found_rate": round(found, 4),
                              "seconds": round(time.monotonic() - t0, 2), "eval_seconds": round(time.monotonic() - t, 2)},
                             sort_keys=True), flush=True)
            if a.until_version is not None and version >= a.until_version:
                break
            version += 1
    finally:
        watcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
