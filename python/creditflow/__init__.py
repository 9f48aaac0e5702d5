"""creditflow for Python: the rollout-worker and trainer ends of creditflow (docs/python.md).

Rollout workers build and publish trajectories (build_trajectory, RolloutPublisher); trainers
read per-token advantages (SampleStream, to_numpy / to_torch) and announce new policy
versions (announce_policy). The wire format is documented in docs/wire-format.md, the sample
fields and how to use them in a loss in docs/trainers.md.

The names below are imported when first used: importing creditflow itself imports nothing,
so that creditflow.llama (the torch Llama the GPU scorer pod shares with creditflow.policy)
needs torch alone, the codecs work without confluent_kafka, and the policy without numpy.
"""

import importlib

__version__ = "0.1.0"

# Each public name and the module that defines it.
_FROM = {
    "to_numpy": "batch", "to_torch": "batch",
    "DEFAULT_TEMPLATE": "trajectory", "InvalidTrajectory": "trajectory", "Limits": "trajectory",
    "build_trajectory": "trajectory", "byte_tokenizer": "trajectory", "gold_target": "trajectory",
    "validate_trajectory": "trajectory",
    "AUTO": "wire", "CURRENT": "wire", "LEGACY": "wire", "WireError": "wire", "decode_dead_letter": "wire",
    "decode_policy": "wire", "decode_sample": "wire", "decode_scored": "wire", "decode_trajectory": "wire",
    "encode_policy": "wire", "encode_trajectory": "wire",
    "RolloutPublisher": "kafka", "SampleStream": "stream", "PolicyWatcher": "kafka", "announce_policy": "kafka",
    "ensure_policy_topic": "kafka", "DeliveryError": "kafka", "murmur2": "kafka",
}

__all__ = [
    "build_trajectory", "validate_trajectory", "gold_target", "byte_tokenizer", "Limits", "InvalidTrajectory",
    "DEFAULT_TEMPLATE", "encode_trajectory", "decode_trajectory", "decode_sample", "decode_scored",
    "encode_policy", "decode_policy", "decode_dead_letter", "WireError", "LEGACY", "AUTO", "CURRENT",
    "to_numpy", "to_torch",
    "RolloutPublisher", "SampleStream", "PolicyWatcher", "announce_policy", "ensure_policy_topic", "DeliveryError",
    "murmur2",
]


# Submodules that `import creditflow` made attributes when it imported them eagerly.
_SUBMODULES = ("batch", "trajectory", "wire", "kafka", "stream", "chunks", "envs", "policy", "llama")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module("." + name, __name__)
    mod = _FROM.get(name)
    if mod is None:
        raise AttributeError("module 'creditflow' has no attribute %r" % name)
    value = getattr(importlib.import_module("." + mod, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
