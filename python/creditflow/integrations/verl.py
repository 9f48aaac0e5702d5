"""verl's v1 trainer on creditflow's per-token advantages (docs/integrations.md).

Importing this module imports verl (``verl.trainer.ppo.v1``, checked against verl 0.9.1 with
TransferQueue 0.1.11); ``import creditflow`` alone never does. The package declares it as a
``verl.plugins`` entry point, so ``import verl`` registers the trainer. The pieces:

- ``CreditflowAdvantage``: a mixin for a v1 ``PPOTrainer`` whose ``_compute_advantage`` reads
  each trajectory from TransferQueue as verl's own does, publishes it to creditflow, waits for
  its sample and writes ``advantages`` and ``returns`` back, aligned with ``response_mask``
  (0 on tool tokens).
- ``CreditflowTrainer``: verl's colocated asynchronous trainer with that mixin, registered
  as ``trainer.v1.trainer_mode=creditflow``.
- ``AnnouncePolicy``: a verl ``CheckpointCallback`` announcing every saved
  ``global_step_N/actor/huggingface`` on the policy topic; the trainer installs it itself.

Settings are read from ``trainer.v1.creditflow`` (``VerlSettings``).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
import uuid
from dataclasses import dataclass, field, fields

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.workers.utils.padding import response_to_nested

from ..trajectory import DEFAULT_TEMPLATE, build_trajectory
from .bridge import Bridge, gold_answers, hf_tokenize
from .rows import MissingSamples, align_advantages, split_turns

__all__ = ["VerlSettings", "CreditflowAdvantage", "CreditflowTrainer", "AnnouncePolicy", "MissingSamples",
           "settings_from_config"]

logger = logging.getLogger(__name__)

# What _compute_advantage reads from TransferQueue for every trajectory.
FIELDS = ["uid", "prompts", "responses", "response_mask", "rm_scores", "rollout_log_probs", "reward_model"]


@dataclass
class VerlSettings:
    """``trainer.v1.creditflow`` in verl's config (add keys with ``+trainer.v1.creditflow.<key>=``).

    - `brokers`: Kafka bootstrap servers of the processor (`creditflow run`).
    - `gold_key`: the key of the dataset's ``reward_model`` dict holding the gold answer (a
      string or a list of strings); None: no gold answer, hence no LAPO process credit.
    - `timeout`: seconds to wait for a batch's samples before ``MissingSamples``.
    - `tokenize`: ``"module:function"``, a ``text -> (ids, char_offsets)`` function for the
      gold target; None: the trainer's tokenizer (its offset mapping).
    - `tool_kind` / `final_kind`: the kinds of turns followed by tool output and of the final
      turn (`--eligible-kinds` of `creditflow run` decides which turns get process credit).
    - `run_id`: makes trajectory and prompt ids unique across runs (default: random).
    - `group_id`: consumer group of the sample reader (default ``creditflow-verl-<run_id>``).
    - `announce`: announce every saved checkpoint on the policy topic (needs ``hf_model`` in
      ``actor_rollout_ref.actor.checkpoint.save_contents``).
    - `client_config`: extra librdkafka settings for the publisher and the reader.
    """

    brokers: str
    gold_key: str | None = "ground_truth"
    timeout: float = 300.0
    tokenize: str | None = None
    template: str = DEFAULT_TEMPLATE
    tool_kind: str = "search"
    final_kind: str = "answer"
    trajectories_topic: str = "creditflow.trajectories"
    samples_topic: str = "creditflow.samples"
    policy_topic: str = "creditflow.policy"
    source: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    group_id: str | None = None
    announce: bool = True
    client_config: dict = field(default_factory=dict)


def settings_from_config(config) -> VerlSettings:
    """``VerlSettings`` from verl's config (``trainer.v1.creditflow``); ValueError naming
    what is missing or unknown."""
    from omegaconf import OmegaConf
    section = config.trainer.v1.get("creditflow", None)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    known = {f.name for f in fields(VerlSettings)}
    # the trainer mode's own settings (parameter_sync_step) live in the same section
    values = {k: v for k, v in values.items() if k not in ("parameter_sync_step", "num_warmup_batches")}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError("trainer.v1.creditflow: unknown settings %s (known: %s)" % (unknown, sorted(known)))
    if not values.get("brokers"):
        raise ValueError("trainer.v1.creditflow.brokers is not set: pass +trainer.v1.creditflow.brokers=<host:port> "
                         "(the Kafka brokers `creditflow run` reads)")
    return VerlSettings(**values)


def _load_function(spec):
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError("tokenize %r: expected \"module:function\"" % spec)
    return getattr(importlib.import_module(module), name)


def _rows(td, name):
    """One column of a TransferQueue TensorDict as a list, one entry per trajectory."""
    v = td.get(name)
    if isinstance(v, torch.Tensor):
        return list(v.unbind(0))
    return list(v.tolist())


class CreditflowAdvantage:
    """Mixin for a verl v1 ``PPOTrainer`` subclass (put it first): creditflow computes the
    advantages. ``algorithm.adv_estimator``, ``gamma``, ``lam`` and
    ``norm_adv_by_std_in_grpo`` are then unused; ``use_kl_in_reward`` is refused.

    Each trajectory (TransferQueue key ``{uid}_{session}_{index}``) is published as one
    creditflow trajectory: prompt = ``prompts``, a turn per run of ``response_mask`` 1s in
    ``responses`` with the run of 0s after it (tool output) as its observation, the summed
    ``rm_scores`` as outcome reward, ``reward_model[gold_key]`` as gold answer,
    ``rollout_log_probs`` on the policy tokens, the trajectory's ``min_global_steps`` tag as
    policy version (the global step whose checkpoint generated it) and the trajectories of
    one ``uid`` in the batch as a group. A trajectory without a policy token is not
    published and keeps advantage 0."""

    def __init__(self, config):
        super().__init__(config)
        self.creditflow = settings_from_config(config)
        if config.algorithm.use_kl_in_reward:
            raise ValueError("algorithm.use_kl_in_reward=True is not supported with creditflow's advantages: set it "
                             "to False (creditflow's advantages come from the outcome reward and its scorers)")
        if self.creditflow.announce and not isinstance(self.checkpoint_callback, AnnouncePolicy):
            contents = config.actor_rollout_ref.actor.get("checkpoint", {}).get("save_contents", None) or []
            if "hf_model" not in contents:
                raise ValueError("trainer.v1.creditflow.announce needs Hugging Face checkpoints for the scorers: add "
                                 "hf_model to actor_rollout_ref.actor.checkpoint.save_contents (now %s), or set "
                                 "+trainer.v1.creditflow.announce=False" % list(contents))
            self.checkpoint_callback = AnnouncePolicy(config, inner=self.checkpoint_callback)
        self._cf_bridge = None

    def _creditflow_bridge(self):
        if self._cf_bridge is None:
            self._cf_bridge = Bridge(self.creditflow, "creditflow-verl-")
        return self._cf_bridge

    def _creditflow_tokenize(self):
        s = self.creditflow
        if s.tokenize:
            return _load_function(s.tokenize)
        tok = getattr(self, "tokenizer", None)
        return hf_tokenize(tok) if tok is not None else None

    def _creditflow_trajectories(self, batch, data):
        s = self.creditflow
        n = len(batch.keys)
        uids = [str(u) for u in _rows(data, "uid")]
        prompts, responses = _rows(data, "prompts"), _rows(data, "responses")
        masks, scores = _rows(data, "response_mask"), _rows(data, "rm_scores")
        logps = _rows(data, "rollout_log_probs") if "rollout_log_probs" in data.keys() else [None] * n
        rms = _rows(data, "reward_model") if "reward_model" in data.keys() else [None] * n
        step = int(getattr(self, "global_steps", 0) or 0)
        rows = []  # (prompt ids, response ids, response mask, trajectory id or None)
        for i, key in enumerate(batch.keys):
            m = masks[i].to(torch.int64).tolist()
            tid = "%s-s%d-%s" % (s.run_id, step, key) if 1 in m else None
            rows.append((prompts[i].tolist(), responses[i].tolist(), m, tid))
        members = {}
        for i, r in enumerate(rows):
            if r[3] is not None:
                members.setdefault(uids[i], []).append(i)
        tokenize = self._creditflow_tokenize()
        trajectories = []
        for uid, idx in members.items():
            for j, i in enumerate(idx):
                p, resp, m, tid = rows[i]
                pids, turns = split_turns(p + resp, [0] * len(p) + m, s.tool_kind, s.final_kind)
                tag = batch.tags[i] if batch.tags else {}
                version = tag.get("min_global_steps")
                if version is None:
                    version = max(step - 1, 0)
                rm = rms[i] if isinstance(rms[i], dict) else {}
                lp = None
                if logps[i] is not None:
                    lp = logps[i].to(torch.float32).numpy()[np.asarray(m, dtype=bool)]
                trajectories.append(build_trajectory(
                    trajectory_id=tid, prompt_id="%s-s%d-%s" % (s.run_id, step, uid), group_size=len(idx),
                    sample_index=j, prompt_ids=pids, turns=turns, policy_version=int(version),
                    reward=float(scores[i].to(torch.float64).sum()),
                    gold_answers=gold_answers(rm.get(s.gold_key)) if s.gold_key else (),
                    tokenize=tokenize, template=s.template, rollout_logprobs=lp,
                    temperature=self.config.actor_rollout_ref.rollout.get("temperature", None),
                    source=s.source))
        return rows, trajectories

    def _compute_advantage(self, batch, metrics):
        """creditflow's advantages for the batch, read and written as verl's own
        ``PPOTrainer._compute_advantage`` does (``tq.kv_batch_get`` / ``tq.kv_batch_put``)."""
        # rollout_log_probs and reward_model are read when the records have them (and a gold key is set)
        present = set(batch.fields) if batch.fields else set(FIELDS)
        optional = {"rollout_log_probs", "reward_model"}
        if not self.creditflow.gold_key:
            present.discard("reward_model")
        select = [f for f in FIELDS if f not in optional or f in present]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
        response_mask = data["response_mask"]
        rows, trajectories = self._creditflow_trajectories(batch, data)
        t0 = time.monotonic()
        got = self._creditflow_bridge().exchange(trajectories) if trajectories else {}
        wait = time.monotonic() - t0
        metrics["creditflow/wait_s"] = wait
        metrics["creditflow/trajectories"] = len(trajectories)

        advantages = []
        for p, resp, m, tid in rows:
            if tid is None:
                advantages.append(torch.zeros(len(resp), dtype=torch.float32))
                continue
            full = align_advantages(p + resp, [0] * len(p) + m, got[tid])
            advantages.append(torch.from_numpy(full[len(p):].copy()))
        output = {"advantages": torch.nested.as_nested_tensor(advantages, layout=torch.jagged),
                  "returns": torch.nested.as_nested_tensor([a.clone() for a in advantages], layout=torch.jagged)}

        # Rollout correction (IS weights, rejection sampling) as verl's own _compute_advantage
        # applies it: decoupled mode only.
        rc = self.config.algorithm.get("rollout_correction", None)
        bypass = rc and rc.get("bypass_mode", False)
        if rc is not None and not bypass and "rollout_log_probs" in select:
            corr = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=["response_mask", "rollout_log_probs", "old_log_probs"])
            d = DataProto(batch=corr.to_padded_tensor())
            d, is_metrics = compute_rollout_correction_and_add_to_batch(d, rc)
            metrics.update(is_metrics)
            output["response_mask"] = response_to_nested(d.batch["response_mask"], response_mask)
            if "rollout_is_weights" in d.batch:
                output["rollout_is_weights"] = response_to_nested(d.batch["rollout_is_weights"], response_mask)
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                               fields=TensorDict(output, batch_size=len(batch)))


@register_trainer("creditflow")
class CreditflowTrainer(CreditflowAdvantage, PPOTrainerColocateAsync):
    """verl's colocated asynchronous v1 trainer (``colocate_async``: its settings, such as
    ``num_warmup_batches``, stay under ``trainer.v1.colocate_async``) on creditflow's
    advantages; select it with ``trainer.v1.trainer_mode=creditflow``."""


class AnnouncePolicy(CheckpointCallback):
    """Announces every saved checkpoint's Hugging Face folder
    (``<checkpoint_dir>/actor/huggingface``) on the policy topic as version ``global_step``,
    after `inner` (the callback verl built from ``trainer.checkpoint_callback_class``) ran.
    Asynchronous (Megatron) saves are not announced: their files may still be in flight."""

    def __init__(self, config=None, inner=None):
        super().__init__(config)
        self.settings = settings_from_config(config)
        self.inner = inner
        self.announced = []

    def on_save(self, trainer, global_step, checkpoint_dir, async_save=False, **kwargs):
        if self.inner is not None:
            self.inner.on_save(trainer=trainer, global_step=global_step, checkpoint_dir=checkpoint_dir,
                               async_save=async_save, **kwargs)
        if async_save:
            logger.warning("checkpoint %s saved asynchronously: not announced to the scorers", checkpoint_dir)
            return
        from ..kafka import announce_policy
        folder = os.path.abspath(os.path.join(checkpoint_dir, "actor", "huggingface"))
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise FileNotFoundError("%s has no config.json: the scorers cannot load it; add hf_model to "
                                    "actor_rollout_ref.actor.checkpoint.save_contents" % folder)
        s = self.settings
        announce_policy(s.brokers, int(global_step), folder, topic=s.policy_topic, **s.client_config)
        self.announced.append((int(global_step), folder))


