"""The trainer of the training loop (docs/learn.md, docs/trainers.md).

usage: python3 -m creditflow.learn.trainer --brokers B --init DIR --out DIR [--steps N]
           [--groups-per-step K] [--lr LR] [--clip EPS] [--max-policy-lag L]

Reads whole groups from the samples topic (SampleStream.batches), takes --epochs clipped
policy-gradient steps per batch (PPO epochs: the ratio's clip bounds how far they move a token) with creditflow's per-token advantages (importance ratios
against the rollout log-probabilities, logits divided by each sample's temperature, token
mean over the policy tokens), writes the new weights as a Hugging Face checkpoint folder
<out>/v<N>, announces version N on the policy topic and commits the consumed offsets
(creditflow.learn.evaluate evaluates each announced version beside it).

Stdout carries one JSON object per line: {"event": "step", ...} per step, and a last {"event": "done", ...} with the counts the loop proves:
samples by policy_version and by scorer_policy_version, duplicates dropped, reload latency
(announcement → first sample scored with that version reaching the trainer) and the share of
time spent waiting for samples.
"""

import argparse
import collections
import json
import os
import signal
import sys
import time

import torch

from .. import policy as P
from ..batch import to_torch
from ..kafka import SampleStream, announce_policy
from . import rollout


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def pg_loss(model, batch, clip):
    """The clipped policy-gradient loss of docs/trainers.md on one batch of samples."""
    b = to_torch(batch, pad_id=P.PAD)
    temps = torch.tensor([s.get("temperature") or 1.0 for s in batch], dtype=torch.float32)
    logp = P.token_logprobs(model, b["input_ids"], temps)
    mask = b["loss_mask"][:, 1:] * b["attention_mask"][:, 1:].float()
    adv = b["advantages"][:, 1:]
    lp_mu = b["rollout_logprobs"][:, 1:]
    ratio = torch.exp(logp - lp_mu)
    obj = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    loss = -(obj * mask).sum() / mask.sum().clamp(min=1)
    clipped = (((ratio - 1).abs() > clip).float() * mask).sum() / mask.sum().clamp(min=1)
    return loss, float(clipped)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--samples-topic", default="creditflow.samples")
    ap.add_argument("--policy-topic", default="creditflow.policy")
    ap.add_argument("--group", default="creditflow-learn-trainer")
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True, help="folder for the checkpoints v1, v2, …")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--groups-per-step", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--clip", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=2, help="gradient steps on each batch (PPO epochs)")
    ap.add_argument("--max-policy-lag", type=int, default=None,
                    help="skip samples more than N versions behind the newest announced one (counted as stale)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    rollout.setup_torch()
    torch.manual_seed(a.seed)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    model = P.load(a.init)
    tokenizer = os.path.join(a.init, "tokenizer.json")
    extra = {"tokenizer.json": open(tokenizer).read()} if os.path.exists(tokenizer) else {}
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)

    t_start = time.monotonic()
    trajectories = 0

    # Version 0 is the starting checkpoint: announced, so that scorers report it as known.
    announce_policy(a.brokers, 0, os.path.abspath(a.init), topic=a.policy_topic)
    stream = SampleStream(a.brokers, a.group, topic=a.samples_topic, group_timeout=60,
                          max_policy_lag=a.max_policy_lag, policy_topic=a.policy_topic)
    by_version, by_scorer = collections.Counter(), collections.Counter()
    announced, reload_s = {}, {}
    wait = train = 0.0
    step, version = 0, 0
    want = a.groups_per_step
    t_wait = time.monotonic()
    try:
        pending = []
        # max_wait=0: whatever whole groups are ready; a step takes --groups-per-step of them
        for ready in stream.batches(want * 10 ** 6, whole_groups=True, max_wait=0.0):
            pending += ready
            if len({s["prompt_id"] for s in pending}) < want and not stop:
                continue
            batch, pending = pending, []
            now = time.monotonic()
            wait += now - t_wait
            for s in batch:
                by_version[s["policy_version"]] += 1
                sv = s.get("scorer_policy_version")
                by_scorer[-1 if sv is None else sv] += 1
                if sv is not None and sv in announced and sv not in reload_s:
                    reload_s[sv] = now - announced[sv]
            trajectories += len(batch)
            model.train()
            for _ in range(a.epochs):  # PPO-style: the clip bounds how far the epochs move each token
                loss, clipped = pg_loss(model, batch, a.clip)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            step += 1
            version = step
            folder = os.path.abspath(os.path.join(a.out, "v%d" % version))
            P.save(model, folder, extra)
            announce_policy(a.brokers, version, folder, topic=a.policy_topic)
            announced[version] = time.monotonic()
            stream.commit()
            t1 = time.monotonic()
            train += t1 - now
            rewards = [s["reward"] for s in batch]
            emit({"event": "step", "trainer_step": step, "policy_version": version, "samples": len(batch),
                  "groups": len({s["prompt_id"] for s in batch}), "loss": round(float(loss), 5),
                  "clipped": round(clipped, 4), "reward_mean": round(sum(rewards) / len(rewards), 4),
                  "sample_policy_versions": sorted({s["policy_version"] for s in batch}), "trajectories": trajectories,
                  "seconds": round(t1 - t_start, 2)})
            t_wait = time.monotonic()
            if step >= a.steps or stop:
                break
    finally:
        dups, stale = stream.duplicates, stream.stale
        stream.close()
    total = time.monotonic() - t_start
    rl = sorted(reload_s.values())
    emit({"event": "done", "trainer_steps": step, "policy_versions": version, "trajectories": trajectories,
          "samples_by_policy_version": {str(k): v for k, v in sorted(by_version.items())},
          "samples_by_scorer_policy_version": {str(k): v for k, v in sorted(by_scorer.items())},
          "duplicates_dropped": dups, "stale_skipped": stale, "reload_seconds": [round(x, 3) for x in rl],
          "reload_seconds_p50": round(rl[len(rl) // 2], 3) if rl else None,
          "wait_seconds": round(wait, 2), "train_seconds": round(train, 2),
          "trainer_wait_share": round(wait / total, 4) if total > 0 else 0, "seconds": round(total, 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
