"""The trainer plug-ins' connection to creditflow (docs/integrations.md): publish a batch of
trajectories, wait for their samples, give up with ``MissingSamples`` naming what did not
come. Shared by ``creditflow.integrations.trl`` and ``creditflow.integrations.verl``;
framework-free."""

import threading
import time

from .rows import MissingSamples


class Bridge:
    """A publisher and a sample reader, opened when built, and the samples read but not yet
    claimed. `settings` has ``brokers``, ``trajectories_topic``, ``samples_topic``,
    ``timeout``, ``run_id``, ``group_id`` (None: `group_prefix` + run_id) and
    ``client_config``. Only samples whose trajectory id starts with ``run_id + "-"`` are
    kept: the samples topic also carries other runs' and trainers'."""

    def __init__(self, settings, group_prefix):
        from ..kafka import RolloutPublisher
        from ..stream import SampleStream
        s = settings
        self.settings = s
        self.publisher = RolloutPublisher(s.brokers, topic=s.trajectories_topic, **s.client_config)
        self.stream = SampleStream(s.brokers, s.group_id or group_prefix + s.run_id, topic=s.samples_topic,
                                   **s.client_config)
        self.received = {}
        self.prefix = s.run_id + "-"
        self.lock = threading.Lock()

    def exchange(self, trajectories):
        """Publishes the trajectories and returns their samples by trajectory id."""
        want = {t["trajectory_id"] for t in trajectories}
        with self.lock:
            for t in trajectories:
                self.publisher.publish(t)
            self.publisher.flush(self.settings.timeout)
            deadline = time.monotonic() + self.settings.timeout
            while not want.issubset(self.received):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MissingSamples(want - set(self.received), self.settings.timeout, self.settings.samples_topic)
                s = self.stream.poll(min(left, 0.5))
                if s is not None and s["trajectory_id"].startswith(self.prefix):
                    self.received[s["trajectory_id"]] = s
            self.stream.commit()
            return {tid: self.received.pop(tid) for tid in want}

    def close(self):
        self.stream.close()
        self.publisher.close()


def hf_tokenize(tokenizer):
    """``text -> (ids, char_offsets)`` from a Hugging Face fast tokenizer (the gold target)."""
    def tokenize(text):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], enc["offset_mapping"]
    return tokenize


def gold_answers(value):
    """A gold answer value (None, a string or a list of them) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]
