"""Drives verl v1 rollout groups through creditflow.integrations.verl against a running broker
and `creditflow run` (python/verl_plugin_test.go runs it; docs/integrations.md).

Real verl pieces: `import verl` loads the plug-in through the `verl.plugins` entry point that
python/pyproject.toml declares (written here as the package's metadata, since the checkout is
on PYTHONPATH, not installed); the trainer is `get_trainer_cls("creditflow")`, built with its
own `__init__` from verl's `ppo_trainer` config (hydra); the records are verl's
`AgentLoopOutput.as_dict()` put into a real TransferQueue (local Ray, CPU) the way
`AgentLoopWorkerTQ._agent_loop_postprocess` puts them; `_compute_advantage` runs on the
`KVBatchMeta` that put returns and its output is read back from TransferQueue; the checkpoint
hook is the one the trainer installed, called as `_save_checkpoint` calls it; verl's own
`colocate_async` trainer runs on the same records for the layout. Writes one JSON
line per trajectory, then a summary line.
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import tomllib

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
GOLD = "Paris"


def write_entry_points(root):
    """The installed package's metadata for python/ (its verl.plugins entry points)."""
    with open(os.path.join(root, "python", "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    d = tempfile.mkdtemp(prefix="cf-dist-")
    info = os.path.join(d, "creditflow-%s.dist-info" % project["version"])
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: creditflow\nVersion: %s\n" % project["version"])
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        for group, eps in project.get("entry-points", {}).items():
            f.write("[%s]\n" % group)
            for name, target in eps.items():
                f.write("%s = %s\n" % (name, target))
    sys.path.insert(0, d)


def enc(text):
    return list(text.encode("utf-8"))


def trajectory(question, query, result, answer, seed, version):
    """A search turn (its result comes back as tool tokens, response_mask 0), then the answer."""
    import numpy as np
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    rng = np.random.default_rng(seed)
    act1, obs, act2 = enc("<search>%s</search>" % query), enc("<result>%s</result>\n" % result), enc(answer)
    response = act1 + obs + act2
    mask = [1] * len(act1) + [0] * len(obs) + [1] * len(act2)
    logps = [float(-rng.random()) if m else 0.0 for m in mask]
    reward = None if "<answer>" not in answer else (1.0 if "<answer>%s</answer>" % GOLD in answer else 0.0)
    return AgentLoopOutput(prompt_ids=enc("Question: %s\n" % question), response_ids=response, response_mask=mask,
                           response_logprobs=logps, reward_score=reward if reward is not None else 0.0, num_turns=3,
                           metrics=AgentLoopMetrics(),
                           extra_fields={"min_global_steps": version, "max_global_steps": version})


def put_group(g, version, partition):
    """Five trajectories of prompt p<g> into TransferQueue as verl's agent loop puts them; the last
    one has no policy token (an empty answer)."""
    import torch
    import transfer_queue as tq
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict
    q = "what is the capital of France?"
    outs = [trajectory(q, "capital of France", "Paris is the capital of France.", "<answer>Paris</answer>", 1, version),
            trajectory(q, "France", "France is a country in Europe.", "<answer>Lyon</answer>", 2, version),
            trajectory(q, "French capital city", "The capital of France is Paris.", "<answer>Paris</answer>", 3, version),
            trajectory(q, "largest French city", "Marseille is a port.", "<answer>Marseille</answer>", 4, version),
            AgentLoopOutput(prompt_ids=enc("Question: %s\n" % q), response_ids=enc("<r>"), response_mask=[0, 0, 0],
                            response_logprobs=[0.0] * 3, reward_score=0.0, num_turns=1, metrics=AgentLoopMetrics(),
                            extra_fields={"min_global_steps": version, "max_global_steps": version})]
    uid = "p%d" % g
    keys, fields, tags = [], [], []
    for session, out in enumerate(outs):
        field = out.as_dict()
        field.update({"uid": uid, "data_source": "capitals",
                      "reward_model": {"style": "rule", "ground_truth": GOLD}})
        field.pop("multi_modal_data", None)
        field["loss_mask"] = field["response_mask"]
        field["input_ids"] = torch.cat([field["prompts"], field["responses"]])
        field["old_log_probs"] = field["rollout_log_probs"].clone()  # what _compute_old_log_prob would write
        keys.append("%s_%d_0" % (uid, session))
        fields.append(field)
        tags.append({"status": "success", "global_steps": version + 1, "min_global_steps": version,
                     "max_global_steps": version})
    return tq.kv_batch_put(keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(fields), tags=tags)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    write_entry_points(root)

    import verl  # loads the verl.plugins entry points
    from verl.trainer.ppo.v1 import get_trainer_cls
    cls = get_trainer_cls("creditflow")  # registered by `import verl` alone, through the entry point
    registered = "%s.%s" % (cls.__module__, cls.__qualname__)

    import ray
    import torch
    import transfer_queue as tq

    from creditflow.integrations.verl import AnnouncePolicy, MissingSamples

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)  # logical CPUs: TQ's actors take one each
    tq.init()
    trainer = cls(compose_config(verl, a, []))

    lines, waits = [], []
    for g in range(a.groups):
        # the generating weights' step (the min_global_steps tag) differs from global_steps - 1,
        # as in an asynchronous trainer
        meta = put_group(g, version=10 + g, partition="train")
        trainer.global_steps = g + 1
        metrics = {}
        t0 = time.monotonic()
        out_meta = trainer._compute_advantage(meta, metrics)
        waits.append(time.monotonic() - t0)
        if "advantages" not in (out_meta.fields or []):
            sys.exit("_compute_advantage's KVBatchMeta lists no advantages field: %s" % out_meta)
        back = tq.kv_batch_get(keys=meta.keys, partition_id="train",
                               select_fields=["prompts", "responses", "response_mask", "advantages", "returns"])
        for i, key in enumerate(meta.keys):
            p, r = back["prompts"][i].tolist(), back["responses"][i].tolist()
            m, adv, ret = back["response_mask"][i].tolist(), back["advantages"][i], back["returns"][i]
            if adv.shape[0] != len(r) or ret.shape[0] != len(r):
                sys.exit("%s: %d advantages, %d returns for %d response tokens" % (key, adv.shape[0], ret.shape[0], len(r)))
            if not torch.equal(adv, ret):
                sys.exit("%s: returns differ from advantages" % key)
            lines.append({"trajectory_id": "verltest-s%d-%s" % (g + 1, key) if 1 in m else None,
                          "input_ids": p + r, "mask": [0] * len(p) + m,
                          "advantage": [0.0] * len(p) + adv.tolist(), "policy_version": 10 + g,
                          "wait_s": metrics["creditflow/wait_s"]})

    # verl's own colocated asynchronous trainer (GRPO) on the same records: the plug-in's output
    # has the layout verl writes (one float32 per response token, 0 where response_mask is 0)
    stock = get_trainer_cls("colocate_async")(compose_config(verl, a, [
        "trainer.v1.trainer_mode=colocate_async", "algorithm.adv_estimator=grpo"]))
    smeta = put_group(a.groups - 1, 10 + a.groups - 1, "stock")  # the last group again, same keys
    stock._compute_advantage(smeta, {})
    ours = tq.kv_batch_get(keys=smeta.keys, partition_id="train", select_fields=["advantages"])
    theirs = tq.kv_batch_get(keys=smeta.keys, partition_id="stock", select_fields=["advantages", "response_mask"])
    layout = 0
    for i in range(len(smeta.keys)):
        o, t, m = ours["advantages"][i], theirs["advantages"][i], theirs["response_mask"][i]
        if o.shape != t.shape or o.dtype != t.dtype:
            sys.exit("row %d: advantages %s %s, verl's own %s %s" % (i, tuple(o.shape), o.dtype, tuple(t.shape), t.dtype))
        if bool((t[m == 0] != 0).any()) or bool((o[m == 0] != 0).any()):
            sys.exit("row %d: a non-zero advantage where response_mask is 0" % i)
        layout += 1

    # the timeout names what is missing: samples read from a topic nobody writes
    trainer.creditflow = dataclasses.replace(trainer.creditflow, timeout=3, run_id="verlmissing",
                                             samples_topic="creditflow.samples.nobody")
    trainer._cf_bridge = None
    missing = None
    try:
        trainer._compute_advantage(put_group(0, 0, "missing"), {})
    except MissingSamples as e:
        missing = {"ids": e.missing, "message": str(e)}

    # the checkpoint hook the trainer installed, called as _save_checkpoint calls it
    d = tempfile.mkdtemp(prefix="verl-ckpt-")
    step_dir = os.path.join(d, "global_step_4")
    os.makedirs(os.path.join(step_dir, "actor", "huggingface"))
    with open(os.path.join(step_dir, "actor", "huggingface", "config.json"), "w") as f:
        f.write("{}")
    hook = trainer.checkpoint_callback
    hook.on_save(trainer=trainer, global_step=4, checkpoint_dir=step_dir, async_save=False)
    announced = read_policy(a.brokers)

    # what was published for each trajectory, read back from the trajectories topic
    published = read_trajectories(a.brokers, "verltest-")
    for line in lines:
        t = published.get(line["trajectory_id"])
        if t is not None:
            line["published"] = {"policy_version": t["policy_version"], "reward": t["reward"],
                                 "gold_answers": [str(x) for x in (t["gold_answers"] if t["gold_answers"] is not None else [])], "group_size": t["group_size"],
                                 "prompt_id": t["prompt_id"], "turns": len(t["turns"]),
                                 "rollout_logprobs": len(t["rollout_logprobs"]) if t["rollout_logprobs"] is not None else 0}

    # settings the trainer refuses when it is built
    refused = {}
    for name, override in (("use_kl_in_reward", "algorithm.use_kl_in_reward=true"),
                           ("hf_model", "actor_rollout_ref.actor.checkpoint.save_contents=[model]")):
        try:
            cls(compose_config(verl, a, [override]))
            refused[name] = None
        except ValueError as e:
            refused[name] = str(e)

    with open(a.out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.write(json.dumps({"summary": True, "registered": registered, "wait_s": waits, "missing": missing,
                            "hook": type(hook).__name__ if isinstance(hook, AnnouncePolicy) else repr(hook),
                            "announced": announced, "refused": refused,
                            "layout_checked": layout}) + "\n")
    tq.close()
    ray.shutdown()


def compose_config(verl, a, extra):
    """verl's ppo_trainer config (hydra) with the creditflow trainer selected."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return compose("ppo_trainer", overrides=[
            "trainer.v1.trainer_mode=creditflow", "+trainer.v1.creditflow.brokers=" + a.brokers,
            "+trainer.v1.creditflow.run_id=verltest", "+trainer.v1.creditflow.timeout=%g" % a.timeout,
            "+trainer.v1.creditflow.tokenize=creditflow:byte_tokenizer",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
            "actor_rollout_ref.rollout.n=5"] + extra)


def read_trajectories(brokers, prefix):
    from confluent_kafka import Consumer, TopicPartition

    from creditflow import decode_trajectory
    c = Consumer({"bootstrap.servers": brokers, "group.id": "verl-trajectory-check", "enable.auto.commit": False})
    meta = c.list_topics("creditflow.trajectories", timeout=10)
    parts = list(meta.topics["creditflow.trajectories"].partitions)
    c.assign([TopicPartition("creditflow.trajectories", p, 0) for p in parts])
    out, idle = {}, time.monotonic() + 5
    try:
        while time.monotonic() < idle:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            t = decode_trajectory(m.value())
            if t["trajectory_id"].startswith(prefix):
                out[t["trajectory_id"]] = t
            idle = time.monotonic() + 2
    finally:
        c.close()
    return out


def read_policy(brokers):
    from confluent_kafka import Consumer, TopicPartition

    from creditflow import decode_policy
    c = Consumer({"bootstrap.servers": brokers, "group.id": "verl-policy-check", "enable.auto.commit": False})
    c.assign([TopicPartition("creditflow.policy", 0, 0)])
    end = time.monotonic() + 30
    try:
        while time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and not m.error():
                return decode_policy(m.value())
    finally:
        c.close()
    return None


if __name__ == "__main__":
    main()
