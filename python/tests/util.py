"""Shared fixtures of the package tests."""

import io
import os
import random
import struct

try:
    import avro.io
    import avro.schema
except ImportError:  # avro is optional outside CI: the tests that compare with it skip
    if os.environ.get("CI") == "true":
        raise
    avro = None

from creditflow import wire


def avro_encode(name, datum, generation=None):
    """Frames datum with avro (the reference implementation) for comparison."""
    text = wire.schema_text(name, generation)
    schema = avro.schema.parse(text)
    buf = io.BytesIO()
    c = wire.codec(name)
    fp = c.writers[generation].fingerprint if generation else c.current.fingerprint
    buf.write(wire.MAGIC + fp)
    avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


def avro_decode(name, value, generation=None):
    schema = avro.schema.parse(wire.schema_text(name, generation))
    return avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(value[10:])))


def i32(xs):
    return struct.pack("<%di" % len(xs), *xs)


def f32(xs):
    return struct.pack("<%df" % len(xs), *xs)


def sample_datum(n_tokens=64, seed=1, current=True, ppo=False):
    """A Sample record as Avro datum (packed fields as bytes), n_tokens long."""
    rng = random.Random(seed)
    toks = [rng.randrange(151936) for _ in range(n_tokens)]
    mask = bytes(rng.randrange(2) for _ in range(n_tokens))
    adv = [rng.uniform(-2, 2) if m else 0.0 for m in mask]
    lps = [-rng.random() if m else 0.0 for m in mask]
    d = {
        "trajectory_id": "t-%d" % seed, "prompt_id": "p-%d" % (seed // 4), "group_size": 4,
        "sample_index": seed % 4, "policy_version": 7, "created_at_ms": 1764500000000 + seed,
        "method": "attnsr" if ppo else "lapo", "output": "token_rewards" if ppo else "advantages",
        "partial": False, "reward": 1.0, "outcome_advantage": 0.5,
        "tokens": i32(toks), "loss_mask": mask,
        "advantages": None if ppo else f32(adv), "token_rewards": f32(adv) if ppo else None,
        "rollout_logprobs": f32(lps), "temperature": 1.0,
        "turns": [{"kind": "search", "eligible": True, "delta": 0.1, "z": 0.2, "z_norm": 0.3, "gate": 1,
                   "process_advantage": 0.25, "advantage": 0.75, "p": None, "step_reward": None, "weight": None},
                  {"kind": "answer", "eligible": False, "delta": None, "z": None, "z_norm": None, "gate": 0,
                   "process_advantage": 0.0, "advantage": 0.5, "p": None, "step_reward": None, "weight": None}],
        "attnsr": {"confidence": 0.5, "focus": 0.25, "consensus": 0.125, "baseline": 0.1, "budget": 0.3} if ppo else None,
    }
    if current:
        d["scorer_policy_version"] = 6
        d["source"] = "nq"
    return d
