"""Drives one TRL AsyncGRPO rollout group through creditflow.integrations.trl against a
running broker and `creditflow run` (python/trl_plugin_test.go runs it; docs/integrations.md).

Real TRL pieces: the training rows come from TRL's own turn reconciliation
(`_chain_to_sequences` over `TurnRecord`s: tool output is context, mask 0), the rewards from
TRL's `_AsyncRolloutLoop._score_group` (called by the plug-in's override on a loop object built
without `__init__`, as TRL's tests do: no vLLM server, no spawned process), the packing from
TRL's `TreeRow` and `DataCollatorForRollout`. Writes one JSON line per row, then a summary line.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import numpy as np  # noqa: E402
from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout  # noqa: E402
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TurnRecord, _chain_to_sequences  # noqa: E402
from trl.experimental.async_grpo.packing import TreeRow  # noqa: E402

from creditflow import byte_tokenizer  # noqa: E402
from creditflow.integrations.trl import (AnnouncePolicy, CreditflowRolloutLoop, CreditflowSettings,  # noqa: E402
                                         MissingSamples, PerTokenAdvantageCollator)

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
    lines, waits, packed_checked = [], [], 0
    for g in range(a.groups):
        group = make_group(g, version=g)
        t0 = time.monotonic()
        samples = asyncio.run(loop._score_group(group))
        waits.append(time.monotonic() - t0)
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

    # every saved checkpoint is announced: a Hugging Face folder, as Trainer.save_model writes it
    from confluent_kafka import Consumer, TopicPartition
    from transformers import LlamaConfig, LlamaForCausalLM, TrainerControl, TrainerState, TrainingArguments
    from creditflow import decode_policy
    out_dir = tempfile.mkdtemp(prefix="trl-ckpt-")
    ckpt = os.path.join(out_dir, "checkpoint-7")
    LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(ckpt)
    cb = AnnouncePolicy(a.brokers, version_fn=lambda: 3)
    cb.on_save(TrainingArguments(output_dir=out_dir, report_to=[]), TrainerState(global_step=7), TrainerControl())
    c = Consumer({"bootstrap.servers": a.brokers, "group.id": "trl-policy-check", "enable.auto.commit": False})
    c.assign([TopicPartition("creditflow.policy", 0, 0)])
    announced = None
    end = time.monotonic() + 30
    while announced is None and time.monotonic() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            announced = decode_policy(m.value())
    c.close()

    with open(a.out, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        f.write(json.dumps({"summary": True, "wait_s": waits, "packed_terms_checked": packed_checked,
                            "missing": missing, "announced": announced,
                            "checkpoint_files": sorted(os.listdir(ckpt))}) + "\n")


def _scalar_row(samples):
    row = TreeRow()
    for smp in samples:
        row.add({"input_ids": smp.input_ids, "completion_mask": smp.completion_mask,
                 "old_log_probs": smp.old_log_probs, "advantage": 0.0, "group_id": smp.group_id,
                 "metrics": smp.metrics})
    return row


if __name__ == "__main__":
    main()
