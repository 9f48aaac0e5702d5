"""Drives TRL AsyncGRPO rollout groups through creditflow.integrations.trl against a running
broker and `creditflow run` (python/trl_plugin_test.go runs it; docs/integrations.md).

Real TRL pieces: the training rows come from TRL's own turn reconciliation
(`_chain_to_sequences` over `TurnRecord`s: tool output is context, mask 0), the rewards from
TRL's `_AsyncRolloutLoop._score_group` (called by the plug-in's override on a loop object built
without `__init__`, as TRL's tests do: no vLLM server, no spawned process), the packing from
TRL's `TreeRow` and `DataCollatorForRollout`; then `CreditflowAsyncGRPOTrainer` itself, built
with TRL's injection points for the rollout worker and weight transfer, reads the samples
through its own data loader and saves a checkpoint (only TRL's GPU-name lookup for its FLOPs
metric is replaced). Writes one JSON line per row, then a summary line.
"""

import argparse
import asyncio
import copy
import json
import os
import queue
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout  # noqa: E402
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TurnRecord, _chain_to_sequences  # noqa: E402
from trl.experimental.async_grpo.packing import TreeRow  # noqa: E402

from creditflow import byte_tokenizer  # noqa: E402
from creditflow.integrations.trl import (CreditflowRolloutLoop, CreditflowSettings, MissingSamples,  # noqa: E402
                                         PerTokenAdvantageCollator)

GOLD = "Paris"


def enc(text):
    return list(text.encode("utf-8"))


def exact_match(completions, answer, **_):
    out = []
    for c, gold in zip(completions, answer):
        text = c[-1]["content"]
        if "<answer>" not in text:
            out.append(None)  # unscorable: TRL gives it advantage 0
        else:
            out.append(1.0 if "<answer>%s</answer>" % gold in text else 0.0)
    return out


def conversation(question, query, result, answer, seed):
    """Two generation calls: a search (its result comes back as tool tokens), then the answer."""
    rng = np.random.default_rng(seed)
    prompt = enc("Question: %s\n" % question)
    act1 = enc("<search>%s</search>" % query)
    obs = enc("<result>%s</result>\n" % result)
    act2 = enc(answer)
    turns = [TurnRecord(prompt, act1, (-rng.random(len(act1))).tolist()),
             TurnRecord(prompt + act1 + obs, act2, (-rng.random(len(act2))).tolist())]
    seqs, _ = _chain_to_sequences(turns, "r%d" % seed, fork_threshold=1024)
    return seqs, answer


def make_group(group_id, version):
    q = "what is the capital of France?"
    convs = [
        conversation(q, "capital of France", "Paris is the capital of France.", "<answer>Paris</answer>", 1),
        conversation(q, "France", "France is a country in Europe.", "<answer>Lyon</answer>", 2),
        conversation(q, "French capital city", "The capital of France is Paris.", "<answer>Paris</answer>", 3),
        conversation(q, "largest French city", "Marseille is a port.", "<answer>Marseille</answer>", 4),
        conversation(q, "France", "no result", "I do not know", 5),  # no answer: unscorable
    ]
    n = len(convs)
    return RolloutGroup(
        prompts=[[{"role": "user", "content": q}]] * n,
        reward_kwargs={"answer": [GOLD] * n},
        completions=[[{"role": "assistant", "content": a}] for _, a in convs],
        completions_ids=[list(s[0].input_ids) for s, _ in convs],
        completions_sequences=[s for s, _ in convs],
        tool_call_counts=[1] * n, tool_failure_counts=[0] * n,
        model_version=version, group_id=group_id,
        env_rewards=[None] * n, rollout_rewards=[None] * n)


def bare_loop(settings):
    loop = CreditflowRolloutLoop.__new__(CreditflowRolloutLoop)
    loop.creditflow = settings
    loop.reward_funcs = [exact_match]
    loop.reward_func_names = ["exact_match"]
    loop._env_reward_types = []
    loop.temperature = 1.0
    loop.tokenizer = None
    return loop


def main():
    from accelerate.state import PartialState
    PartialState()  # TRL's loop logs through accelerate, which its spawned child initializes the same way
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    settings = CreditflowSettings(brokers=a.brokers, gold_column="answer", timeout=a.timeout,
                                  tokenize=byte_tokenizer, run_id="trltest")
    loop = bare_loop(settings)
    lines, waits, packed_checked, first_group = [], [], 0, None
    for g in range(a.groups):
        group = make_group(g, version=g)
        t0 = time.monotonic()
        samples = asyncio.run(loop._score_group(group))
        waits.append(time.monotonic() - t0)
        first_group = first_group or samples
        k = 0
        for i, seqs in enumerate(group.completions_sequences):
            for r, _ in enumerate(seqs):
                smp = samples[k]
                k += 1
                scored = not np.isnan(smp.metrics["reward"])
                lines.append({"trajectory_id": "trltest-g%d-c%d-r%d" % (g, i, r) if scored else None,
                              "input_ids": smp.input_ids.tolist(), "completion_mask": smp.completion_mask.tolist(),
                              "advantage": np.asarray(smp.advantage).tolist(), "reward": smp.metrics["reward"] if scored else None,
                              "model_version": smp.model_version, "wait_s": smp.metrics["creditflow/wait_s"]})
        # TRL's packer over the samples, as RolloutQueueDataset hands them on
        row = TreeRow()
        for smp in samples:
            row.add({"input_ids": smp.input_ids, "completion_mask": smp.completion_mask,
                     "old_log_probs": smp.old_log_probs, "advantage": smp.advantage, "group_id": smp.group_id,
                     "metrics": smp.metrics})
        batch = PerTokenAdvantageCollator(pad_token_id=0).torch_call([[row]])
        stock = DataCollatorForRollout(pad_token_id=0).torch_call(
            [[_scalar_row(samples)]])
        want = [float(adv[p]) for smp in samples
                for adv, m in [(np.asarray(smp.advantage), smp.completion_mask)]
                for p in range(1, len(m)) if m[p]]
        got = batch["advantages"][0].tolist()
        if len(got) != len(want) or any(abs(x - y) > 0 for x, y in zip(got, want)):
            sys.exit("packed advantages differ from the samples' per-token advantages")
        for key in ("input_ids", "token_index", "shift_labels", "old_log_probs"):
            if not (batch[key] == stock[key]).all():
                sys.exit("packed %s differs from TRL's own collator" % key)
        packed_checked += len(want)

    # the timeout names what is missing: samples read from a topic nobody writes
    short = CreditflowSettings(brokers=a.brokers, gold_column="answer", timeout=3, tokenize=byte_tokenizer,
                               run_id="trlmissing", samples_topic="creditflow.samples.nobody")
    missing = None
    try:
        asyncio.run(bare_loop(short)._score_group(make_group(0, 0)))
    except MissingSamples as e:
        missing = {"ids": e.missing, "message": str(e)}

    # the trainer: CreditflowAsyncGRPOTrainer built for real, with TRL's own injection points for
    # its rollout worker and weight transfer (no vLLM here); its data loader packs per-token
    # advantages; a checkpoint it saves is announced
    trainer_check = check_trainer(a.brokers, first_group)

    with open(a.out, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        f.write(json.dumps({"summary": True, "wait_s": waits, "packed_terms_checked": packed_checked,
                            "missing": missing, **trainer_check}) + "\n")


class QueueWorker:
    """TRL's RolloutWorkerProtocol over a queue already holding scored samples (twice: accelerate's
    dispatcher reads one micro-batch ahead)."""

    def __init__(self, samples):
        self.rollout_buffer = queue.Queue()
        for smp in samples + samples:
            self.rollout_buffer.put(smp)

    def start(self):
        pass

    def stop(self):
        pass

    def update_model_version(self, version):
        pass

    def check_health(self, stale_after_s):
        pass


class NoWeightTransfer:
    def init_weight_transfer(self):
        pass

    def pause(self):
        pass

    def send_weights(self, iterator):
        pass

    def resume(self):
        pass

    def destroy(self):
        pass


def tiny_model(folder):
    """A one-layer Llama over byte tokens and its tokenizer, in a Hugging Face folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    vocab = {("<%d>" % i if i < 33 or i > 126 else chr(i)): i for i in range(256)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<0>", eos_token="<1>").save_pretrained(folder)
    LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(folder)


def check_trainer(brokers, samples):
    from confluent_kafka import Consumer, TopicPartition
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig
    from trl.experimental.async_grpo import async_grpo_trainer as trainer_mod

    from creditflow import decode_policy
    from creditflow.integrations.trl import CreditflowAsyncGRPOTrainer

    # The one thing patched: TRL reads the GPU's name for its FLOPs metric in __init__
    # (torch.cuda.get_device_name), which fails without an NVIDIA driver.
    trainer_mod.get_peak_flops_per_device = lambda accelerator, dtype: 1.0
    d = tempfile.mkdtemp(prefix="trl-trainer-")
    model_dir = os.path.join(d, "model")
    tiny_model(model_dir)
    args = AsyncGRPOConfig(output_dir=os.path.join(d, "out"), token_budget=0, per_device_train_batch_size=len(samples),
                           report_to=[], use_cpu=True, bf16=False, save_steps=1, max_steps=1)
    # TRL's completion log prints one advantage per completion: refused at construction.
    logging_args = copy.copy(args)
    logging_args.log_completions = True
    try:
        CreditflowAsyncGRPOTrainer(model=model_dir, reward_funcs=[exact_match], args=logging_args,
                                   creditflow=CreditflowSettings(brokers=brokers, run_id="trlrefused"))
        sys.exit("the trainer accepted log_completions=True, which TRL cannot print per-token advantages for")
    except ValueError as e:
        if "log_completions" not in str(e):
            raise
    trainer = CreditflowAsyncGRPOTrainer(
        model=model_dir, reward_funcs=[exact_match], args=args,
        train_dataset=Dataset.from_dict({"prompt": ["q"], "answer": [GOLD]}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        rollout_worker=QueueWorker(samples), weight_transfer=NoWeightTransfer(),
        creditflow=CreditflowSettings(brokers=brokers, run_id="trltrainer"))
    dl = trainer.get_train_dataloader()
    collator = type(getattr(dl, "collate_fn", None) or dl.base_dataloader.collate_fn).__name__
    batch = next(iter(dl))
    got = sorted(batch["advantages"][batch["token_index"] >= 0].tolist())
    want = sorted(float(np.float32(smp.advantage[p])) for smp in samples
                  for p in range(1, len(smp.completion_mask)) if smp.completion_mask[p])
    if got != want:
        sys.exit("the trainer's data loader packed %d advantages, not the samples' %d per-token values"
                 % (len(got), len(want)))

    trainer.create_optimizer_and_scheduler(num_training_steps=1)  # train() makes them before its first save
    trainer.state.global_step = 4
    trainer.model_version = 2
    trainer._save_checkpoint(trainer.model, None)  # what Trainer does at save_steps, then on_save
    trainer.control = trainer.callback_handler.on_save(trainer.args, trainer.state, trainer.control)

    c = Consumer({"bootstrap.servers": brokers, "group.id": "trl-policy-check", "enable.auto.commit": False})
    c.assign([TopicPartition("creditflow.policy", 0, 0)])
    announced = None
    end = time.monotonic() + 30
    while announced is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            announced = decode_policy(m.value())
    c.close()
    files = sorted(os.listdir(announced["checkpoint"])) if announced and os.path.isdir(announced["checkpoint"]) else []
    shutil.rmtree(d, ignore_errors=True)
    return {"collator": collator, "trainer_packed_terms": len(got), "announced": announced,
            "checkpoint_files": files}


def _scalar_row(samples):
    row = TreeRow()
    for smp in samples:
        row.add({"input_ids": smp.input_ids, "completion_mask": smp.completion_mask,
                 "old_log_probs": smp.old_log_probs, "advantage": 0.0, "group_id": smp.group_id,
                 "metrics": smp.metrics})
    return row


if __name__ == "__main__":
    main()
