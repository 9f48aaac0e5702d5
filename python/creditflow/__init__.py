"""creditflow for Python: the rollout-worker and trainer ends of creditflow (docs/python.md).

Rollout workers build and publish trajectories (build_trajectory, RolloutPublisher); trainers
read per-token advantages (SampleStream, to_numpy / to_torch) and announce new policy
versions (announce_policy). The wire format is documented in docs/wire-format.md, the sample
fields and how to use them in a loss in docs/trainers.md.
"""

from .batch import to_numpy, to_torch
from .trajectory import (DEFAULT_TEMPLATE, InvalidTrajectory, Limits, build_trajectory, byte_tokenizer,
                         gold_target, validate_trajectory)
from .wire import (AUTO, CURRENT, LEGACY, WireError, decode_dead_letter, decode_policy, decode_sample, decode_scored,
                   decode_trajectory, encode_policy, encode_trajectory)

__version__ = "0.1.0"

__all__ = [
    "build_trajectory", "validate_trajectory", "gold_target", "byte_tokenizer", "Limits", "InvalidTrajectory",
    "DEFAULT_TEMPLATE", "encode_trajectory", "decode_trajectory", "decode_sample", "decode_scored",
    "encode_policy", "decode_policy", "decode_dead_letter", "WireError", "LEGACY", "AUTO", "CURRENT",
    "to_numpy", "to_torch",
    "RolloutPublisher", "SampleStream", "PolicyWatcher", "announce_policy", "ensure_policy_topic", "DeliveryError",
    "murmur2",
]


def __getattr__(name):
    # The Kafka classes import confluent_kafka only when used, so that the codecs work without it.
    if name in ("RolloutPublisher", "SampleStream", "PolicyWatcher", "announce_policy", "ensure_policy_topic",
                "DeliveryError", "murmur2"):
        from . import kafka
        return getattr(kafka, name)
    raise AttributeError("module 'creditflow' has no attribute %r" % name)
