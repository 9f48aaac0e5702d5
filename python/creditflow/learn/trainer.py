"""The trainer of the training loop (docs/learn.md, docs/trainers.md).

usage: python3 -m creditflow.learn.trainer --brokers B --init DIR --out DIR [--steps N]
           [--groups-per-step K] [--loss pg|ppo] [--epochs E] [--lr LR] [--clip EPS]
           [--is-cap C] [--gamma G] [--gae-lambda L] [--critic-lr LR] [--max-policy-lag L]
           [--oracle-labels DIR --oracle-lambda LAM [--oracle-once]] [--step-rewards-at-end]
           [--credit-labels DIR]

Reads whole groups from the samples topic (SampleStream.batches) and takes exactly
--groups-per-step of them per step (the rest wait for the next step). Per batch it computes the
log-probabilities of the policy before this update once, then takes --epochs optimizer steps
(default 1) of the clipped objective of creditflow.learn.losses: the ratio against the policy
before the update, clipped at ±--clip, each token weighted by a truncated importance weight
min(--is-cap, π_old/μ) against the rollout log-probabilities, logits divided by each sample's
temperature, token mean over the policy tokens, Adam, gradient norm clipped at 1.
--loss pg uses creditflow's per-token advantages; --loss ppo runs GAE(--gamma, --gae-lambda)
over the token rewards of AttnSR's ppo output with a critic (a value head, trained on the
returns by its own Adam at --critic-lr) and normalizes the advantages over the batch. A sample
without the field its loss needs stops the run with an error naming it.
With --oracle-labels DIR (the oracle-credit arm) it adds to each sample's advantages (loss pg)
+--oracle-lambda on the action tokens of the turns the world labelled key or enabling and
−--oracle-lambda on those of its harmful turns, or (loss ppo) the same ±--oracle-lambda as step
rewards on each labelled turn's last action token, before GAE (creditflow.learn.oracle: the
labels the workers wrote to DIR; --oracle-once pays only the first key turn, the enabling turn
before it and every harmful turn); a sample without labels stops the run like a missing field.
With --step-rewards-at-end (loss ppo) each sample's token rewards are summed onto its last policy
token before GAE: AttnSR's step rewards paid with the terminal reward instead of on the moves.
With --credit-labels DIR (the workers' turn labels, as for the oracle arm) it reports per step
where AttnSR's step shares landed on the turns the world labelled helpful or harmful, against an
even spread (creditflow.learn.allocation; the alloc_* fields); it changes no loss.
It writes the new weights as a Hugging Face checkpoint folder <out>/v<N>, announces version N
on the policy topic and commits the consumed offsets (creditflow.learn.evaluate evaluates each
announced version beside it).

Stdout carries one JSON object per line: {"event": "step", ...} per step (loss, clip fraction,
gradient norm and clip hits, approximate KL to the behaviour policy, entropy, value loss with a
critic, step rewards seen), {"event": "error", "message"} when it stops on bad input, and a last
{"event": "done", ...} with the counts the loop proves: samples by policy_version and by
scorer_policy_version, duplicates dropped, reload latency (announcement → first sample scored
with that version reaching the trainer) and the share of time spent waiting for samples.
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
from ..kafka import announce_policy
from ..stream import SampleStream
from . import allocation as A
from . import losses as L
from . import oracle as O
from . import rollout

MAX_GRAD_NORM = 1.0


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def take_groups(pending, want):
    """The first `want` groups of pending (in arrival order) and the rest."""
    order = list(dict.fromkeys(s["prompt_id"] for s in pending))
    keep = set(order[:want])
    return [s for s in pending if s["prompt_id"] in keep], [s for s in pending if s["prompt_id"] not in keep]


def step_rewards_seen(batch):
    """Nonzero token rewards other than the one on each sample's last policy token (the
    terminal reward R_i): the step rewards s_{i,k} of AttnSR's ppo output (none with β = 0).
    Returns their count and the sum of their absolute values."""
    n, total = 0, 0.0
    for s in batch:
        tr, mask = s.get("token_rewards"), s.get("loss_mask")
        if tr is None or mask is None:
            continue
        pol = [i for i, m in enumerate(mask) if m]
        for i in pol[:-1]:
            if tr[i] != 0:
                n += 1
                total += abs(float(tr[i]))
    return n, total


def add_oracle(b, batch, reader, lam, loss="pg", paid_once=False):
    """Adds the oracle term to b.adv (loss pg), or its step rewards to b.rewards (loss ppo),
    shifted as the batch's tensors are (with paid_once, of the labels oracle.once keeps);
    returns the step's counts of the turns the world labelled (all of them, paid or not) and of
    the tokens the term touched, by sign."""
    of = O.oracle_step_rewards if loss == "ppo" else O.oracle_term
    term = torch.zeros(b.ids.shape, dtype=torch.float32)
    info = {"oracle_key_turns": 0, "oracle_enabling_turns": 0, "oracle_harmful_turns": 0,
            "oracle_tokens_plus": 0, "oracle_tokens_minus": 0}
    for i, s in enumerate(batch):
        lab = reader.get(s["trajectory_id"])
        t = of(s, O.once(lab) if paid_once else lab, lam)
        term[i, :len(t)] = torch.from_numpy(t)
        for k in ("key", "enabling", "harmful"):
            info["oracle_%s_turns" % k] += len(lab.get(k + "_turns") or [])
        info["oracle_tokens_plus"] += int((t > 0).sum())
        info["oracle_tokens_minus"] += int((t < 0).sum())
    if loss == "ppo":
        b.rewards = b.rewards + term[:, 1:] * b.mask
    else:
        b.adv = b.adv + term[:, 1:] * b.mask
    return info


def train_batch(model, opt, critic, copt, batch, a, reader=None, credit=None):
    """--epochs optimizer steps on one batch; returns the step's diagnostics."""
    b = L.Batch(batch)
    extra = add_oracle(b, batch, reader, a.oracle_lambda, a.loss, a.oracle_once) if reader is not None else {}
    if credit is not None:
        extra.update(A.batch_allocation(batch, credit))
    if a.step_rewards_at_end:
        extra["rewards_moved_rows"] = int(((b.rewards * b.mask != 0).sum(-1) > 1).sum())
        b.rewards = L.rewards_at_end(b.rewards, b.mask)
    model.eval()
    with torch.no_grad():
        old, _ = L.logprobs_entropy(model, b)
        info = {}
        if a.loss == "ppo":
            critic.eval()
            values = critic.values(b.ids)
            adv, returns = L.gae(b.rewards, values, b.mask, a.gamma, a.gae_lambda)
            m = b.mean(adv)
            sd = torch.sqrt(b.mean((adv - m) ** 2)).clamp(min=1e-8)
            adv = (adv - m) / sd * b.mask
            info["value_mean"] = float(b.mean(values))
            info["return_mean"] = float(b.mean(returns))
        else:
            adv = b.adv
    model.train()
    norms, hits, vlosses = [], 0, []
    for _ in range(a.epochs):
        loss, diag = L.policy_loss(model, b, old, adv, a.clip, a.is_cap)
        opt.zero_grad()
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM))
        norms.append(norm)
        hits += norm > MAX_GRAD_NORM
        opt.step()
        if a.loss == "ppo":
            critic.train()
            vl = L.value_loss(critic, b, returns)
            copt.zero_grad()
            vl.backward()
            torch.nn.utils.clip_grad_norm_(critic.parameters(), MAX_GRAD_NORM)
            copt.step()
            vlosses.append(float(vl))
    out = {"loss": round(float(loss.detach()), 5), "grad_norm": round(norms[-1], 5), "grad_norm_max": round(max(norms), 5),
           "grad_clip_hits": hits, "optimizer_steps": len(norms)}
    out.update({k: float("%.4g" % v) for k, v in diag.items()})  # four significant digits: a KL of 1e-7 shows
    out.update({k: round(v, 5) for k, v in info.items()})
    out.update(extra)
    if vlosses:
        with torch.no_grad():
            after = float(L.value_loss(critic, b, returns))
        out["value_loss"] = round(vlosses[0], 6)
        out["value_loss_after"] = round(after, 6)
    return out


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
    ap.add_argument("--loss", choices=sorted(L.FIELD), default="pg",
                    help="pg: creditflow's per-token advantages; ppo: GAE with a critic over the token rewards")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--clip", type=float, default=0.2)
    ap.add_argument("--epochs", "--ppo-epochs", type=int, default=1, help="optimizer steps on each batch")
    ap.add_argument("--is-cap", type=float, default=2.0, help="C of the truncated importance weight against μ")
    ap.add_argument("--gamma", type=float, default=1.0, help="--loss ppo: GAE's γ")
    ap.add_argument("--gae-lambda", type=float, default=0.95, help="--loss ppo: GAE's λ")
    ap.add_argument("--critic-lr", type=float, default=1e-3, help="--loss ppo: the critic's learning rate (Adam)")
    ap.add_argument("--max-policy-lag", type=int, default=None,
                    help="skip samples more than N versions behind the newest announced one (counted as stale)")
    ap.add_argument("--oracle-labels", default=None,
                    help="the oracle-credit arm: the folder of the workers' turn labels (loss pg: ±λ on the "
                         "labelled turns' advantages; loss ppo: ±λ step rewards on their last action token)")
    ap.add_argument("--oracle-lambda", type=float, default=0.5, help="the oracle term's size λ")
    ap.add_argument("--oracle-once", action="store_true",
                    help="pay each label once: the first key turn, the enabling turn before it, every harmful turn")
    ap.add_argument("--step-rewards-at-end", action="store_true",
                    help="--loss ppo: move each sample's step rewards onto its terminal token (the sum on the "
                         "last policy token): the control of where AttnSR's step rewards are placed")
    ap.add_argument("--credit-labels", default=None,
                    help="the folder of the workers' turn labels: report per step where AttnSR's step shares "
                         "landed on the labelled turns (the alloc_* fields; the loss is unchanged)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.epochs < 1:
        ap.error("--epochs must be at least 1")
    if a.step_rewards_at_end and a.loss != "ppo":
        ap.error("--step-rewards-at-end moves token rewards: it needs --loss ppo")
    if a.oracle_once and not a.oracle_labels:
        ap.error("--oracle-once pays the oracle's labels once: it needs --oracle-labels")
    reader = O.LabelReader(a.oracle_labels) if a.oracle_labels else None
    credit = O.LabelReader(a.credit_labels) if a.credit_labels else None
    label_readers = [r for r in (reader, credit) if r is not None]
    rollout.setup_torch()
    torch.manual_seed(a.seed)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    model = P.load(a.init)
    tokenizer = os.path.join(a.init, "tokenizer.json")
    extra = {"tokenizer.json": open(tokenizer).read()} if os.path.exists(tokenizer) else {}
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    critic = copt = None
    if a.loss == "ppo":
        critic = L.Critic(a.init)
        copt = torch.optim.Adam(critic.parameters(), lr=a.critic_lr)

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
    failed = None
    t_wait = time.monotonic()
    try:
        pending = []
        # max_wait=0: whatever whole groups are ready; a step takes --groups-per-step of them
        for ready in stream.batches(want * 10 ** 6, whole_groups=True, max_wait=0.0):
            pending += ready
            if len({s["prompt_id"] for s in pending}) < want and not stop:
                continue
            batch, pending = take_groups(pending, want)
            if not batch:
                break
            now = time.monotonic()
            wait += now - t_wait
            try:
                L.check_fields(batch, a.loss)
                for r in label_readers:
                    for s in batch:
                        O.check_labels(s, r.get(s["trajectory_id"]))
            except (L.MissingField, O.MissingLabels) as e:
                failed = str(e)
                emit({"event": "error", "message": failed})
                break
            for s in batch:
                by_version[s["policy_version"]] += 1
                sv = s.get("scorer_policy_version")
                by_scorer[-1 if sv is None else sv] += 1
                if sv is not None and sv in announced and sv not in reload_s:
                    reload_s[sv] = now - announced[sv]
            trajectories += len(batch)
            diag = train_batch(model, opt, critic, copt, batch, a, reader, credit)
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
            n_sr, abs_sr = step_rewards_seen(batch)
            line = {"event": "step", "trainer_step": step, "policy_version": version, "samples": len(batch),
                    "groups": len({s["prompt_id"] for s in batch}), "reward_mean": round(sum(rewards) / len(rewards), 4),
                    "sample_policy_versions": sorted({s["policy_version"] for s in batch}), "trajectories": trajectories,
                    "seconds": round(t1 - t_start, 2)}
            if a.loss == "ppo":
                line.update({"step_rewards_nonzero": n_sr, "step_rewards_abs_sum": round(abs_sr, 5)})
            line.update(diag)
            emit(line)
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
    if failed:
        print("trainer: " + failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
