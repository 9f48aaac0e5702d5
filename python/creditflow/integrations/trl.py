"""TRL's AsyncGRPO trained on creditflow's per-token advantages (docs/integrations.md).

Importing this module imports TRL (``trl.experimental.async_grpo``, checked against
trl 1.16.0); ``import creditflow`` alone never does. The pieces:

- ``CreditflowRolloutLoop``: the rollout loop whose ``_score_group`` keeps TRL's rewards
  (reward functions, environment rewards), publishes the group's rows as trajectories,
  waits for their samples and returns ``RolloutSample``\\ s whose ``advantage`` is a
  per-token array over ``input_ids`` (0 on prompt and tool tokens).
- ``CreditflowRolloutWorker``: TRL's worker running that loop (``_loop_cls``).
- ``PerTokenAdvantageCollator``: TRL's collator, packing per-token advantages where TRL
  repeats one scalar per completion.
- ``AnnouncePolicy``: a ``TrainerCallback`` that announces every saved checkpoint on the
  policy topic, so that scorers following it score with the new weights.
- ``CreditflowAsyncGRPOTrainer``: ``AsyncGRPOTrainer`` with the three above.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import TrainerCallback
from trl.experimental.async_grpo import async_grpo_trainer as _trainer_mod
from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer, DataCollatorForRollout
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker, RolloutSample, _AsyncRolloutLoop

from ..trajectory import DEFAULT_TEMPLATE, build_trajectory
from .bridge import Bridge, gold_answers, hf_tokenize
from .rows import MissingSamples, align_advantages, split_turns

__all__ = ["CreditflowSettings", "CreditflowRolloutLoop", "CreditflowRolloutWorker", "PerTokenAdvantageCollator",
           "AnnouncePolicy", "CreditflowAsyncGRPOTrainer", "MissingSamples"]


@dataclass
class CreditflowSettings:
    """Where the plug-in publishes and reads, and how it builds trajectories.

    - `brokers`: Kafka bootstrap servers of the processor (`creditflow run`).
    - `gold_column`: the dataset column (a ``reward_kwargs`` key) holding the gold answer, a
      string or a list of strings; None: no gold answer, hence no LAPO process credit.
    - `timeout`: seconds to wait for a group's samples before ``MissingSamples``.
    - `tokenize`: ``text -> (ids, char_offsets)`` for the gold target; None: the loop's
      tokenizer (its offset mapping). Must be picklable (the loop runs in a spawned process).
    - `tool_kind` / `final_kind`: the kinds of turns followed by tool output and of the final
      turn (docs/wire-format.md; `--eligible-kinds` of `creditflow run` decides which turns get
      process credit).
    - `run_id`: makes trajectory and prompt ids unique across runs (default: random).
    - `group_id`: consumer group of the sample reader (default ``creditflow-trl-<run_id>``).
    - `limits`: the processor's limits (``creditflow.Limits``: vocabulary size, eligible
      kinds ...) the trajectories are checked against before publishing; None: the defaults.
    - `client_config`: extra librdkafka settings for the publisher and the reader.
    """

    brokers: str
    gold_column: str | None = "answer"
    timeout: float = 300.0
    tokenize: object = None
    template: str = DEFAULT_TEMPLATE
    tool_kind: str = "search"
    final_kind: str = "answer"
    trajectories_topic: str = "creditflow.trajectories"
    samples_topic: str = "creditflow.samples"
    policy_topic: str = "creditflow.policy"
    source: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    group_id: str | None = None
    limits: object = None
    client_config: dict = field(default_factory=dict)


_hf_tokenize, _gold_answers = hf_tokenize, gold_answers


class _Bridge(Bridge):
    """The loop's Bridge (consumer group ``creditflow-trl-<run_id>`` unless set)."""

    def __init__(self, settings):
        super().__init__(settings, "creditflow-trl-")


class CreditflowRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop with creditflow's credit assignment in ``_score_group``.

    Each training row of the group (a conversation is one row, or several when TRL forked it
    after re-tokenization drift) is published as one trajectory: prompt = the row's tokens
    before its first policy token, a turn per run of policy tokens (``completion_mask`` 1)
    with the run of 0s after it as its observation, TRL's summed reward as the outcome
    reward, the `gold_column` value as gold answer, ``model_version`` as policy version and
    the sampled log-probs as rollout log-probs. Conversations TRL could not score (every
    reward None) are not published and keep advantage 0, as in TRL.
    """

    def __init__(self, *, creditflow: CreditflowSettings, **kwargs):
        super().__init__(**kwargs)
        self.creditflow = creditflow

    def _creditflow_bridge(self):
        b = getattr(self, "_cf_bridge", None)
        if b is None:
            b = self._cf_bridge = _Bridge(self.creditflow)
        return b

    def _trajectories(self, group, samples):
        s = self.creditflow
        tokenize = s.tokenize or _hf_tokenize(self.tokenizer)
        golds = group.reward_kwargs.get(s.gold_column) if s.gold_column else None
        rows = []  # (sample index, trajectory id or None)
        k = 0
        for i, seqs in enumerate(group.completions_sequences):
            for r, _ in enumerate(seqs):
                reward = samples[k].metrics["reward"]
                tid = None if math.isnan(reward) else "%s-g%d-c%d-r%d" % (s.run_id, group.group_id, i, r)
                rows.append((k, i, tid))
                k += 1
        if k != len(samples):
            raise ValueError("TRL returned %d samples for %d rows" % (len(samples), k))
        members = [row for row in rows if row[2] is not None]
        trajectories = []
        for j, (k, i, tid) in enumerate(members):
            smp = samples[k]
            prompt, turns = split_turns(smp.input_ids, smp.completion_mask, s.tool_kind, s.final_kind)
            policy = np.asarray(smp.completion_mask).astype(bool)
            trajectories.append(build_trajectory(
                trajectory_id=tid, prompt_id="%s-g%d" % (s.run_id, group.group_id),
                group_size=len(members), sample_index=j, prompt_ids=prompt, turns=turns,
                policy_version=int(group.model_version), reward=float(smp.metrics["reward"]),
                gold_answers=_gold_answers(golds[i]) if golds is not None else (),
                tokenize=tokenize, template=s.template,
                rollout_logprobs=np.asarray(smp.old_log_probs, dtype=np.float32)[policy],
                temperature=getattr(self, "temperature", None), source=s.source, limits=s.limits))
        return rows, trajectories

    def _creditflow_score(self, group, samples):
        rows, trajectories = self._trajectories(group, samples)
        t0 = time.monotonic()
        got = self._creditflow_bridge().exchange(trajectories) if trajectories else {}
        wait = time.monotonic() - t0
        out = []
        for k, _, tid in rows:
            smp = samples[k]
            if tid is None:
                adv = np.zeros(len(smp.input_ids), dtype=np.float32)
            else:
                adv = align_advantages(smp.input_ids, smp.completion_mask, got[tid])
            metrics = dict(smp.metrics)
            metrics["creditflow/wait_s"] = wait
            out.append(RolloutSample(prompt=smp.prompt, completion=smp.completion, input_ids=smp.input_ids,
                                     completion_mask=smp.completion_mask, old_log_probs=smp.old_log_probs,
                                     advantage=adv, model_version=smp.model_version, group_id=smp.group_id,
                                     metrics=metrics, enqueued_at=smp.enqueued_at))
        return out

    async def _score_group(self, group):
        # TRL's rewards (reward functions, environment rewards), then creditflow's advantages.
        samples = await super()._score_group(group)
        return await asyncio.to_thread(self._creditflow_score, group, samples)


class CreditflowRolloutWorker(AsyncRolloutWorker):
    """TRL's rollout worker running ``CreditflowRolloutLoop``; pass ``creditflow=`` settings."""

    _loop_cls = CreditflowRolloutLoop


def _per_token(sample, nodes):
    # The loss terms of one sample in TreeRow.pack's order: every position p >= 1 whose
    # token is trained, its advantage read off the per-token array.
    adv = np.asarray(sample["advantage"], dtype=np.float32)
    mask = np.asarray(sample["completion_mask"])
    n = len(nodes)
    if adv.ndim == 0:
        return [float(adv)] * int(mask[1:n].astype(bool).sum())
    if adv.shape[0] != len(mask):
        raise ValueError("per-token advantage of length %d for %d tokens" % (adv.shape[0], len(mask)))
    return adv[1:n][mask[1:n].astype(bool)].tolist()


@dataclass
class PerTokenAdvantageCollator(DataCollatorForRollout):
    """``DataCollatorForRollout`` for samples whose ``advantage`` is a per-token array over
    ``input_ids``: each loss term gets its own token's advantage instead of one scalar per
    completion (scalar advantages still work)."""

    def torch_call(self, examples):
        (rows,) = examples
        per_row = [[a for smp, nodes in zip(row.samples, row.sample_nodes, strict=True)
                    for a in _per_token(smp, nodes)] for row in rows]
        held = [(smp, smp["advantage"]) for row in rows for smp in row.samples]
        try:
            for smp, _ in held:  # TRL's packer reads a scalar; the real values are set below
                smp["advantage"] = 0.0
            batch = super().torch_call(examples)
        finally:
            for smp, adv in held:
                smp["advantage"] = adv
        width = batch["advantages"].shape[-1]
        adv = torch.zeros((len(rows), width), dtype=torch.float32)
        for r, vals in enumerate(per_row):
            if len(vals) != int((batch["token_index"][r] >= 0).sum()):
                raise ValueError("row %d: %d advantages for %d loss terms" % (r, len(vals), int((batch["token_index"][r] >= 0).sum())))
            adv[r, :len(vals)] = torch.tensor(vals, dtype=torch.float32)
        batch["advantages"] = adv
        return batch


class AnnouncePolicy(TrainerCallback):
    """Announces every saved checkpoint (``<output_dir>/checkpoint-<step>``, Hugging Face
    format) on the policy topic, from the main process only. The version is
    ``version_fn()`` (the trainer's model version, the one its rollouts carry) or, without
    it, the global step."""

    def __init__(self, brokers, version_fn=None, topic="creditflow.policy", **client_config):
        self.brokers, self.version_fn, self.topic = brokers, version_fn, topic
        self.client_config = client_config
        self.announced = []

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from ..kafka import announce_policy
        folder = os.path.abspath(os.path.join(args.output_dir, "checkpoint-%d" % state.global_step))
        version = int(self.version_fn()) if self.version_fn is not None else int(state.global_step)
        announce_policy(self.brokers, version, folder, topic=self.topic, **self.client_config)
        self.announced.append((version, folder))


@contextlib.contextmanager
def _swapped(name, value):
    old = getattr(_trainer_mod, name)
    setattr(_trainer_mod, name, value)
    try:
        yield
    finally:
        setattr(_trainer_mod, name, old)


class CreditflowAsyncGRPOTrainer(AsyncGRPOTrainer):
    """``AsyncGRPOTrainer`` trained on creditflow's advantages: its rollout worker runs
    ``CreditflowRolloutLoop``, its data loader packs per-token advantages and every saved
    checkpoint is announced on the policy topic. Takes TRL's arguments plus ``creditflow``."""

    def __init__(self, *args, creditflow: CreditflowSettings, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if getattr(config, "log_completions", False):
            # TRL prints each completion's advantage as one number ("%.2f"); creditflow's are
            # per-token arrays, so the print would fail inside the rollout loop.
            raise ValueError("log_completions=True is not supported with creditflow's per-token advantages: "
                             "set log_completions=False (the samples topic and creditflow inspect show them)")
        self.creditflow = creditflow

        def worker(**kw):
            return CreditflowRolloutWorker(creditflow=creditflow, **kw)

        # TRL builds its worker and collator by module-level name; both are swapped for the
        # duration of the call only.
        with _swapped("AsyncRolloutWorker", worker):
            super().__init__(*args, **kwargs)
        self.add_callback(AnnouncePolicy(creditflow.brokers, lambda: self.model_version, creditflow.policy_topic,
                                         **creditflow.client_config))

    def get_train_dataloader(self):
        with _swapped("DataCollatorForRollout", PerTokenAdvantageCollator):
            return super().get_train_dataloader()
