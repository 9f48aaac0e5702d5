"""Following policy announcements on Kafka (docs/python.md, docs/scorer-protocol.md).

A background confluent-kafka consumer reads the compacted policy topic from its beginning,
without a consumer group's commits, and keeps the newest announced version (the maximum
seen). When it grows and the announcement names a checkpoint, the pod loads that
checkpoint with the announced version through Pod.load: the new model is built next to the
old one and swapped in between requests, so in-flight requests finish on the model they
started with and none fails; answers carry the version that computed them. A failed load
is logged and counted (creditflow_scorer_pod_model_loads_total{result="error"}), and the old
model keeps serving. An announcement without a checkpoint (weights not published) changes
nothing.

The PolicyAnnouncement decoder is built in (three fields, docs/wire-format.md) so the pod
image needs only torch and confluent-kafka; a test keeps its fingerprint equal to the
creditflow package's.
"""

import threading
import time

MAGIC = b"\xc3\x01"
# CRC-64-AVRO fingerprint of schemas/policy.avsc's canonical form, as on the wire.
POLICY_FINGERPRINT = bytes.fromhex("045df95fbcb1b418")
POLICY_KEY = b"policy"


class BadAnnouncement(ValueError):
    pass


def _varint(b, pos):
    u = shift = 0
    for _ in range(10):
        if pos >= len(b):
            raise BadAnnouncement("varint runs past the end")
        c = b[pos]
        pos += 1
        u |= (c & 0x7F) << shift
        if c < 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
    raise BadAnnouncement("varint too long")


def decode_announcement(value):
    """{"version", "checkpoint", "announced_at_ms"} of a framed PolicyAnnouncement."""
    if len(value) < 10 or value[:2] != MAGIC:
        raise BadAnnouncement("not Avro single-object encoded")
    if value[2:10] != POLICY_FINGERPRINT:
        raise BadAnnouncement("fingerprint %s is not PolicyAnnouncement's" % bytes(value[2:10]).hex())
    version, pos = _varint(value, 10)
    n, pos = _varint(value, pos)
    if n < 0 or pos + n > len(value):
        raise BadAnnouncement("checkpoint length does not fit")
    checkpoint = bytes(value[pos:pos + n]).decode("utf-8")
    at, pos = _varint(value, pos + n)
    if pos != len(value):
        raise BadAnnouncement("trailing bytes")
    return {"version": version, "checkpoint": checkpoint, "announced_at_ms": at}


class PolicyFollower:
    """Follows `topic` on `brokers` and hot-loads announced checkpoints into `pod`."""

    def __init__(self, pod, brokers, topic="creditflow.policy", poll_interval=0.2, client_config=None):
        from confluent_kafka import Consumer  # only pods that follow announcements need it

        conf = {"bootstrap.servers": brokers, "group.id": "creditflow-scorer-pod", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "earliest"}
        conf.update(client_config or {})
        self.pod, self.topic, self.poll_interval = pod, topic, poll_interval
        self.newest = None
        self.bad = 0
        self._consumer = Consumer(conf)
        self._assigned = False
        self._stop = threading.Event()
        self._thread = None

    def _assign(self):
        from confluent_kafka import TopicPartition

        md = self._consumer.list_topics(self.topic, timeout=5)
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            return False
        self._consumer.assign([TopicPartition(self.topic, p, -2) for p in t.partitions])  # from the beginning
        self._assigned = True
        return True

    def handle(self, value):
        """Applies one announcement value (also used by tests)."""
        if value is None:
            return  # a tombstone (compaction clean-up) announces nothing
        try:
            a = decode_announcement(value)
        except (BadAnnouncement, UnicodeDecodeError) as e:
            self.bad += 1
            self.pod.log.warn("ignoring an undecodable policy announcement", topic=self.topic, error=str(e))
            return
        if self.newest is not None and a["version"] <= self.newest:
            return
        self.newest = a["version"]
        cur = self.pod.current
        if a["version"] <= cur.policy_version:
            return
        if not a["checkpoint"]:
            self.pod.log.info("policy announced without a checkpoint; keeping the current weights",
                              version=a["version"], serving=cur.policy_version)
            return
        self.pod.log.info("loading announced policy", version=a["version"], checkpoint=a["checkpoint"])
        try:
            self.pod.load(a["checkpoint"], a["version"])
        except Exception as e:  # noqa: BLE001 - a bad checkpoint must not stop the follower
            self.pod.log.error("announced checkpoint failed to load; the previous model keeps serving",
                               version=a["version"], checkpoint=a["checkpoint"], error=str(e))

    def poll_once(self, timeout):
        if not self._assigned and not self._assign():
            time.sleep(timeout)
            return
        msg = self._consumer.poll(timeout)
        while msg is not None:
            if not msg.error():
                self.handle(msg.value())
            msg = self._consumer.poll(0)

    def start(self):
        def run():
            while not self._stop.is_set():
                try:
                    self.poll_once(self.poll_interval)
                except Exception as e:  # noqa: BLE001 - keep following through broker outages
                    self.pod.log.warn("policy topic read failed; retrying", error=str(e))
                    self._stop.wait(1.0)
        self._thread = threading.Thread(target=run, name="policy-follow", daemon=True)
        self._thread.start()
        return self

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._consumer.close()
