"""A rollout worker of the training loop (docs/learn.md).

usage: python3 -m creditflow.learn.worker --brokers B --init DIR [--env searchqa|household]
           [--worker K --workers W] [--group-size G] [--groups-per-batch N]
           [--groups-per-version N] [--last-version V] [--seed S] [--temperature T] [--judge-noise Q]
           [--labels FILE] [--reward judge|likelihood|gold-bonus|likelihood-bonus] [--gold-bonus B] [--label-noise]

Follows the policy topic (PolicyWatcher): whenever a newer version is announced it loads that
checkpoint; it plays whole groups (G episodes of one question, sampled at --temperature from
the current policy) in the interactive world and publishes them with RolloutPublisher: token
ids, the per-token rollout log-probabilities, the temperature and the policy version that
generated them. It plays exactly --groups-per-version groups under one version (batches of at
most --groups-per-batch), then waits (at most --wait seconds) for the next one: the loop gives
each worker its share of the trainer's groups per step, so that the workers produce what the
trainer consumes. Under a version newer than --last-version (the trainer's last) it plays
nothing: no trainer step would read those groups.
With --judge-noise Q the published reward is a flaky judge's verdict, wrong with probability Q
(creditflow.envs.judge); the held-out evaluation still counts true answers.
With --reward likelihood the published reward is the gold answer's likelihood given the
pre-answer context under the playing policy; with --reward gold-bonus, the judge's verdict plus B
when the gold string appears in an observation; with --reward likelihood-bonus, the verdict
plus B times the likelihood; with --label-noise the gold given to the scorer
is what the judge believes, wrong exactly where the judge errs (creditflow.learn.rewards: the
controls of the noisy-judge comparison, docs/learn.md).
With --labels FILE it appends each episode's turn labels (the world's key, enabling and harmful
turns; creditflow.learn.oracle) to FILE, one JSON line per trajectory, before publishing it: the
oracle-credit arm's trainer reads them.
Prompt ids are <run>-g<NNNNNN> with the worker's own residue class of group numbers, so workers
(and a restarted worker with another --first-group) never collide. One JSON line per batch on
stdout; SIGTERM ends it after the batch in flight is acknowledged.
"""

import argparse
import json
import signal
import sys
import time

import torch

from .. import envs as E
from .. import policy as P
from ..kafka import PolicyWatcher, RolloutPublisher
from . import oracle, rewards, rollout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="creditflow.trajectories")
    ap.add_argument("--policy-topic", default="creditflow.policy")
    ap.add_argument("--init", required=True, help="the starting checkpoint (policy version 0)")
    ap.add_argument("--env", default="searchqa", choices=sorted(E.ENVS))
    ap.add_argument("--run", default="learn", help="prompt id prefix")
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--first-group", type=int, default=0, help="first local group number (a restarted worker starts past its predecessor)")
    ap.add_argument("--group-size", type=int, default=5)
    ap.add_argument("--groups-per-batch", type=int, default=2)
    ap.add_argument("--groups-per-version", type=int, default=4)
    ap.add_argument("--last-version", type=int, default=None,
                    help="play nothing under a newer version (the version of the trainer's last step minus one)")
    ap.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a new version before producing anyway")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--judge-noise", type=float, default=0.0,
                    help="publish a flaky judge's reward: wrong with this probability (creditflow.envs.judge)")
    ap.add_argument("--reward", default="judge", choices=rewards.REWARDS,
                    help="the published reward: the judge's verdict, the gold answer's likelihood, or the verdict plus a gold-in-observation or likelihood bonus")
    ap.add_argument("--gold-bonus", type=float, default=0.5, help="with --reward gold-bonus: the bonus")
    ap.add_argument("--label-noise", action="store_true",
                    help="give the scorer the gold the judge believes (wrong exactly where the judge errs)")
    ap.add_argument("--labels", default=None,
                    help="append each trajectory's turn labels to this JSON-lines file before publishing it")
    a = ap.parse_args(argv)
    rollout.setup_torch()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    env = E.make_env(a.env)
    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + a.worker * 7919 + a.first_group)
    model, version = P.load(a.init), 0
    watcher = PolicyWatcher(a.brokers, topic=a.policy_topic).start()
    pub = RolloutPublisher(a.brokers, topic=a.topic)
    labels = oracle.LabelWriter(a.labels) if a.labels else None
    local, under_version, waited_since = a.first_group, 0, None
    try:
        while not stop:
            newest = watcher.version
            if newest is not None and newest > version and watcher.checkpoint:
                try:
                    model, version = P.load(watcher.checkpoint), newest
                    under_version, waited_since = 0, None
                except (OSError, ValueError) as e:  # a half-written folder: the next poll retries
                    print(json.dumps({"event": "load_failed", "version": newest, "error": str(e)}), file=sys.stderr)
            idle = (a.last_version is not None and version > a.last_version) or a.groups_per_version < 1
            if idle or under_version >= a.groups_per_version:
                if idle:
                    time.sleep(0.05)
                    continue
                waited_since = waited_since or time.monotonic()
                if time.monotonic() - waited_since < a.wait:
                    time.sleep(0.05)
                    continue
            t0 = time.monotonic()
            # the version's share, or after --wait without a new version one more batch
            n = min(a.groups_per_batch, a.groups_per_version - under_version)
            if n < 1:
                n, waited_since = a.groups_per_batch, None
            groups = [a.worker + a.workers * (local + k) for k in range(n)]
            seeds = [a.seed * 100_000_000 + g for g in groups for _ in range(a.group_size)]
            played = rollout.play(model, env, seeds, temperature=a.temperature, generator=gen)
            wins, ids = 0, []
            for idx, (ep, turns) in enumerate(played):
                g, i = groups[idx // a.group_size], idx % a.group_size
                pid = "%s-g%06d" % (a.run, g)
                tid = "%s-%d" % (pid, i)
                ep.reward = rewards.reward_of(a.reward, ep, turns, tid, noise=a.judge_noise, bonus=a.gold_bonus,
                                              model=model, temperature=a.temperature)
                gold = rewards.scorer_gold(ep, a.judge_noise, tid) if a.label_noise else None
                if labels is not None:
                    labels.write(tid, ep)
                pub.publish(rollout.to_trajectory(env, ep, turns, trajectory_id=tid, prompt_id=pid,
                                                  group_size=a.group_size, sample_index=i, policy_version=version,
                                                  temperature=a.temperature, source=env.name, gold=gold))
                wins += ep.correct
                ids.append(tid)
            pub.flush(60)
            local += n
            under_version += n
            print(json.dumps({"event": "published", "worker": a.worker, "policy_version": version, "groups": len(groups),
                              "trajectories": len(played), "successes": wins,
                              "seconds": round(time.monotonic() - t0, 3), "trajectory_ids": ids}), flush=True)
    finally:
        pub.close(30)
        watcher.close()
        if labels is not None:
            labels.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
