"""Kafka ends of the loop, on confluent-kafka (librdkafka): RolloutPublisher for rollout
workers, announce_policy / PolicyWatcher for policy versions; SampleStream, the trainers'
end, lives in stream.py (creditflow.SampleStream) and builds on this module.

Guarantees:
- RolloutPublisher keys every trajectory by its prompt_id and partitions with murmur2
  (librdkafka's ``murmur2_random``, the Java client's and kafka-go's hash), so Go and Python
  producers sharing a topic put a group in one partition. A failed delivery raises
  DeliveryError from the next publish() or flush(); nothing is only logged.
- SampleStream (stream.py) is at-least-once: commit() commits the offsets of what has been
  yielded (and of what was skipped as a duplicate or as stale), never of samples still
  buffered. Copies of a sample (after a processor restart) are dropped by trajectory_id
  within a bounded window. Trainers sharing a consumer group each get whole groups.
- The newest announced policy version is the maximum version ever read from the policy
  topic; an older announcement never moves it back.
"""

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .wire import HEADER_SCHEMA, WireError, codec, decode_policy, encode_policy, encode_trajectory
from .trajectory import InvalidTrajectory, Limits, validate_trajectory

log = logging.getLogger("creditflow")

__all__ = ["RolloutPublisher", "PolicyWatcher", "announce_policy", "ensure_policy_topic", "DeliveryError",
           "TOPIC_TRAJECTORIES", "TOPIC_SAMPLES", "TOPIC_POLICY", "POLICY_KEY"]

TOPIC_TRAJECTORIES = "creditflow.trajectories"
TOPIC_SAMPLES = "creditflow.samples"
TOPIC_POLICY = "creditflow.policy"
POLICY_KEY = b"policy"


class DeliveryError(KafkaException):
    """A record that the brokers did not acknowledge. ``errors`` lists (key, KafkaError)."""

    def __init__(self, errors):
        key, err = errors[0]
        super().__init__(err)
        self.errors = errors
        self.args = ("%d record(s) not delivered; first (key %r): %s" % (len(errors), key, err),)

    def __str__(self):
        return self.args[0]


def _config(brokers, client_config):
    """bootstrap.servers + client_config; keyword names may use underscores for dots
    (linger_ms=5 is linger.ms=5)."""
    conf = {"bootstrap.servers": brokers if isinstance(brokers, str) else ",".join(brokers)}
    for k, v in client_config.items():
        conf[k.replace("_", ".") if "." not in k else k] = v
    return conf


class RolloutPublisher:
    """Publishes trajectories to `topic`, keyed by prompt_id, murmur2-partitioned.

    ``RolloutPublisher("kafka:9092", linger_ms=5, compression_type="lz4")``: extra keyword
    arguments are librdkafka settings (underscores for dots). `limits` validates every
    trajectory before it is sent (the processor's rules and record-size ceiling); `writer`
    picks the writer schema as in encode_trajectory (default: the oldest that holds the
    record, accepted by processors of every release).
    """

    def __init__(self, brokers, topic=TOPIC_TRAJECTORIES, limits=None, writer="auto", **client_config):
        conf = {"acks": "all"}
        conf.update(_config(brokers, client_config))
        conf["partitioner"] = conf.get("partitioner", "murmur2_random")
        if conf["partitioner"] not in ("murmur2_random", "murmur2"):
            raise ValueError("partitioner must be murmur2_random (the Java client's and kafka-go's hash); "
                             "a group must never split across partitions")
        self.topic, self.limits, self.writer = topic, limits or Limits(), writer
        self._errors = []
        self._lock = threading.Lock()
        self._producer = Producer(conf)
        self.published = 0

    def _on_delivery(self, err, msg):
        if err is not None:
            with self._lock:
                self._errors.append((msg.key(), err))

    def _raise_pending(self):
        with self._lock:
            errs, self._errors = self._errors, []
        if errs:
            raise DeliveryError(errs)

    def publish(self, trajectory):
        """Validates, encodes and sends one trajectory dict (build_trajectory's result).
        Raises InvalidTrajectory before sending anything the processor would dead-letter,
        DeliveryError for earlier records that failed."""
        self._raise_pending()
        validate_trajectory(trajectory, self.limits)
        value = encode_trajectory(trajectory, self.writer)
        if self.limits.max_record_bytes > 0 and len(value) > self.limits.max_record_bytes:
            raise InvalidTrajectory("too_large", "trajectory", "record of %d bytes exceeds the %d-byte limit; raise "
                                    "max_record_bytes on both ends or split the trajectory"
                                    % (len(value), self.limits.max_record_bytes))
        self.publish_raw(trajectory["prompt_id"].encode("utf-8"), value)

    def publish_raw(self, key: bytes, value: bytes):
        """Sends an already-framed Trajectory value with `key` (the prompt_id bytes)."""
        headers = [(HEADER_SCHEMA, codec("Trajectory").fullname.encode())]
        while True:
            try:
                self._producer.produce(self.topic, key=key, value=value, headers=headers, on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.1)  # local queue full: serve delivery reports, then retry
        self.published += 1
        self._producer.poll(0)

    def flush(self, timeout=30.0):
        """Waits until every record is acknowledged; raises DeliveryError for failed ones and
        TimeoutError when records are still in flight after `timeout` seconds."""
        left = self._producer.flush(timeout)
        self._raise_pending()
        if left:
            raise TimeoutError("%d record(s) still in flight after %.1f s; call flush again or check the brokers" % (left, timeout))

    def partition_for(self, key: bytes, partitions: int) -> int:
        """The partition murmur2 assigns `key` among `partitions` (Java's and kafka-go's rule)."""
        return (murmur2(key) & 0x7FFFFFFF) % partitions

    def close(self, timeout=30.0):
        self.flush(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (the Java client's Utils.murmur2), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rem = length & 3
    tail = data[4 * n4:]
    if rem == 3:
        h ^= tail[2] << 16
    if rem >= 2:
        h ^= tail[1] << 8
    if rem >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= (1 << 31) else h


# ----- policy versions ---------------------------------------------------------------------

def ensure_policy_topic(brokers, topic=TOPIC_POLICY, timeout=30.0, **client_config):
    """Creates the policy topic (1 partition, cleanup.policy=compact) when it does not exist."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_config(brokers, client_config))
    md = admin.list_topics(timeout=timeout)
    t = md.topics.get(topic)
    if t is not None and t.error is None:
        return False
    fs = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                       config={"cleanup.policy": "compact"})], request_timeout=timeout)
    for f in fs.values():
        try:
            f.result(timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return True


def announce_policy(brokers, version, checkpoint="", topic=TOPIC_POLICY, timeout=30.0, create=True, **client_config):
    """Announces policy `version` (weights at `checkpoint`) on the compacted policy topic,
    keyed ``policy``; returns once the brokers acknowledged it (DeliveryError otherwise).
    With `create`, a missing topic is created first (compacted, one partition)."""
    value = encode_policy(version, checkpoint, int(time.time() * 1000))
    if create:
        ensure_policy_topic(brokers, topic, timeout, **client_config)
    conf = {"acks": "all"}
    conf.update(_config(brokers, client_config))
    p = Producer(conf)
    errs = []
    p.produce(topic, key=POLICY_KEY, value=value,
              headers=[(HEADER_SCHEMA, codec("PolicyAnnouncement").fullname.encode())],
              on_delivery=lambda err, msg: err is not None and errs.append((msg.key(), err)))
    left = p.flush(timeout)
    if errs:
        raise DeliveryError(errs)
    if left:
        raise TimeoutError("policy announcement not acknowledged after %.1f s" % timeout)


class PolicyWatcher:
    """Follows the policy topic from its beginning in a background thread, without a consumer
    group and without commits. ``version`` is the newest announced version (the maximum seen;
    None before any), ``checkpoint`` its checkpoint. `on_change(announcement)` runs in the
    watcher's thread each time the newest version grows. Undecodable values are counted in
    ``bad`` and skipped."""

    def __init__(self, brokers, topic=TOPIC_POLICY, on_change=None, poll_interval=0.2, **client_config):
        conf = {"group.id": "creditflow-policy-watcher", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "earliest"}
        conf.update(_config(brokers, client_config))
        self.topic, self.on_change, self.poll_interval = topic, on_change, poll_interval
        self.version, self.checkpoint, self.announcement, self.bad = None, "", None, 0
        self._consumer = Consumer(conf)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._assigned = False
        self._thread = None

    def _assign(self):
        md = self._consumer.list_topics(self.topic, timeout=5)
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            return False
        self._consumer.assign([TopicPartition(self.topic, p, -2) for p in t.partitions])  # -2: beginning
        self._assigned = True
        return True

    def _handle(self, msg):
        self.handle(msg.value())

    def handle(self, value):
        """Applies one value of the policy topic (what the thread does with each message)."""
        if value is None:
            return  # a tombstone (compaction clean-up) announces nothing
        try:
            a = decode_policy(value)
        except (WireError, UnicodeDecodeError) as e:
            self.bad += 1
            self._on_bad(e)
            return
        with self._lock:
            if self.version is not None and a["version"] <= self.version:
                return
            self.version, self.checkpoint, self.announcement = a["version"], a["checkpoint"], a
        if self.on_change is not None:
            self.on_change(a)

    def poll_once(self, timeout=0.2):
        """Reads what is available for up to `timeout` seconds (callers without the thread)."""
        if not self._assigned and not self._assign():
            time.sleep(timeout)
            return
        msg = self._consumer.poll(timeout)
        while msg is not None:
            if not msg.error():
                self._handle(msg)
            msg = self._consumer.poll(0)

    def catch_up(self, timeout=10.0):
        """Reads the topic up to its end as of now (so that ``version`` reflects every
        announcement made before the call). Returns False at once when the topic does not
        exist, or when the end was not reached within `timeout`."""
        end = time.monotonic() + timeout
        if not self._assigned and not self._assign():
            return False  # no policy topic yet: nothing was announced
        parts = self._consumer.assignment()
        highs = {}
        for tp in parts:
            lo, hi = self._consumer.get_watermark_offsets(tp, timeout=max(0.1, end - time.monotonic()))
            highs[tp.partition] = hi
        pos = {tp.partition: 0 for tp in parts}
        while any(pos[p] < highs[p] for p in highs):
            if time.monotonic() > end:
                return False
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            pos[msg.partition()] = msg.offset() + 1
            self._handle(msg)
        return True

    def start(self):
        """Starts the background thread; returns self."""
        def run():
            while not self._stop.is_set():
                try:
                    self.poll_once(self.poll_interval)
                except KafkaException as e:
                    self._on_read_error(e)
                    self._stop.wait(self.poll_interval)
        self._thread = threading.Thread(target=run, name="creditflow-policy-watcher", daemon=True)
        self._thread.start()
        return self

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._consumer.close()

    def _on_bad(self, err):
        """Called for each undecodable value, after counting it (subclasses log it)."""

    def _on_read_error(self, err):
        """Called when reading the topic failed; the thread retries (subclasses log it)."""

