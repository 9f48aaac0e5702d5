"""SampleStream: the trainer's reader of the samples topic (docs/python.md, docs/trainers.md).

Guarantees:
- At-least-once: commit() commits the offsets of what has been yielded (and of what was
  skipped as a duplicate or as stale), never of samples still buffered. Copies of a sample
  (after a processor restart) are dropped by trajectory_id within a bounded window.
- Several trainers in one consumer group each get whole groups: the stages key samples by
  prompt_id, so a group's samples share a partition, and a reader that loses a partition in a
  rebalance forgets the samples of it still buffered in unreleased groups (its next owner
  reads them again from the last commit, the whole group).
- A reader leaves its consumer group when closed: by close(), at the end of a with block,
  when garbage-collected, or at interpreter exit. One that dies without leaving (killed) holds
  its partitions until its session times out (session.timeout.ms, 6 s here).
"""

import collections
import logging
import threading
import time
import weakref

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition, libversion

from .chunks import CHUNK, Reassembler
from .kafka import TOPIC_POLICY, TOPIC_SAMPLES, PolicyWatcher, _config
from .wire import WireError, decode_sample

log = logging.getLogger("creditflow")

__all__ = ["SampleStream", "GROUP_CONFIG"]

_BULK = 256  # messages SampleStream takes from librdkafka per call
# Per partition and per fetch request: librdkafka's defaults, said here so that nobody raises
# them: a fetch's answer is handed to the trainer only once all of it has arrived, and one is
# in flight per broker at a time, so larger fetches make the trainer wait for each answer
# (docs/performance-passes.md).
_FETCH_PARTITION_BYTES = 1 << 20
_FETCH_BYTES = 50 << 20

# Consumer-group membership (docs/python.md, "Several trainers"): a reader that dies without
# leaving the group holds its partitions until its session times out, and a reader that joins
# meanwhile waits as long. librdkafka's default is 45 s; 6 s is Kafka's smallest allowed by
# default (the brokers' group.min.session.timeout.ms). Heartbeats come from librdkafka's own
# thread, so a long training step does not end the session (max.poll.interval.ms does, 300 s
# without a poll).
GROUP_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


def _prefetch_config():
    """How librdkafka refills the prefetch queue once it was over its bound
    (queued.max.messages.kbytes, 64 MiB by default). Until v2.2.0 it waits a fixed second
    before fetching again, and a trainer that drains 64 MiB of samples in less then waits for
    data most of that second (docs/performance-passes.md, "The trainer's end stalls"). From
    v2.2.0 the wait is fetch.queue.backoff.ms, set short here; before, the bound is raised
    to 512 MiB so that a trainer needs more than a second to drain it."""
    if libversion()[1] >= 0x020200FF:
        return {"fetch.queue.backoff.ms": 10}
    return {"queued.max.messages.kbytes": 512 << 10}


def _close(consumer, policy, lock):
    """Leaves the group (close(), the end of a with block, garbage collection, interpreter
    exit: whichever comes first, once). A consumer must not be closed while another thread is
    inside one of its calls (at interpreter exit a daemon thread may still be reading): the
    reader's calls hold `lock`, so closing waits for the current one to return; when it does
    not within 5 s, the consumer is left to its session timeout instead."""
    try:
        if policy:
            policy[0].close()
    finally:
        if lock.acquire(timeout=5):
            try:
                consumer.close()
            finally:
                lock.release()
        else:
            log.warning("a SampleStream was not closed: a thread is still reading it; its consumer group "
                        "takes its partitions back after its session timeout")


class SampleStream:
    """Reads training samples with a consumer group; iterate for single samples.

    - duplicates (same trajectory_id within the last `dedupe_window` samples) are dropped and
      counted in ``duplicates``;
    - with `max_policy_lag`, a sample whose policy_version is more than that many versions
      behind the newest announced version (the policy topic) is skipped and counted in
      ``stale``;
    - iteration ends after `idle_timeout` seconds without a sample (None: never);
    - commit() commits what has been yielded so far;
    - samples larger than one Kafka message (written as chunks) are put back together;
      broken chunk sequences are counted in ``broken_chunks``;
    - close() (or a with block) leaves the consumer group, so that the group's other readers
      take over its partitions at once; a stream that is not closed leaves it when it is
      garbage-collected or the interpreter exits.

    Extra keyword arguments are librdkafka consumer settings (underscores for dots); they
    override GROUP_CONFIG (session.timeout.ms 6000, heartbeat.interval.ms 1000).
    """

    def __init__(self, brokers, group_id, topic=TOPIC_SAMPLES, max_policy_lag=None, policy_topic=TOPIC_POLICY,
                 dedupe_window=100000, idle_timeout=None, group_timeout=30.0, **client_config):
        conf = {"group.id": group_id, "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # a trainer started before the samples topic exists finds it within seconds
                "topic.metadata.refresh.interval.ms": 2000,
                # fetches small enough for the trainer to read one while the next arrives (_FETCH_PARTITION_BYTES)
                "max.partition.fetch.bytes": _FETCH_PARTITION_BYTES, "fetch.max.bytes": _FETCH_BYTES,
                **GROUP_CONFIG, **_prefetch_config()}
        conf.update(_config(brokers, client_config))
        self.topic, self.max_policy_lag = topic, max_policy_lag
        self.idle_timeout, self.group_timeout = idle_timeout, group_timeout
        self._window = collections.OrderedDict()
        self._window_size = dedupe_window
        self.duplicates = self.stale = self.undecodable = self.yielded = 0
        # records larger than one message arrive as chunks (docs/wire-format.md)
        self._chunks = Reassembler()
        self.broken_chunks = 0
        # messages fetched from librdkafka in bulk (consume) and not handled yet
        self._buf = collections.deque()
        # offsets: per (topic, partition) the next offset consumed (commit() stops at the open groups' first)
        self._next = {}
        # batches(whole_groups=True): prompt_id -> [first seen, [(sample, (topic, partition, offset), skipped)]],
        # oldest first
        self._groups = collections.OrderedDict()
        self._policy = None
        self._waiting_for_topic = False
        # what the group assigned, kept by the rebalance callbacks (replaced, never changed in place)
        self._assigned = frozenset()
        self._consumer = Consumer(conf)
        # The rebalance callback holds the stream weakly, so that an unreferenced stream is
        # collected (and leaves the group) instead of living on in a cycle with its consumer.
        ref = weakref.ref(self)

        def on_assign(consumer, partitions):
            s = ref()
            if s is not None:
                s._assigned = s._assigned | {(tp.topic, tp.partition) for tp in partitions}

        def on_revoke(consumer, partitions):
            s = ref()
            if s is not None:
                s._on_revoke(consumer, partitions)

        policy = []
        self._lock = threading.Lock()  # held by every call into the consumer (see _close)
        self._closer = weakref.finalize(self, _close, self._consumer, policy, self._lock)
        self._consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        if max_policy_lag is not None:
            self._policy = PolicyWatcher(brokers, topic=policy_topic, **client_config)
            policy.append(self._policy)
            self._policy.catch_up(10.0)
            self._policy.start()

    @property
    def newest_policy_version(self):
        """The newest announced policy version (None without max_policy_lag or before any)."""
        return self._policy.version if self._policy is not None else None

    def assignment(self):
        """The (topic, partition) pairs this reader owns in its consumer group, sorted, as of
        its last rebalance. Safe from any thread (it does not call into the consumer, which
        a thread other than the reading one must not do while it reads)."""
        return sorted(self._assigned)

    def _on_revoke(self, consumer, partitions):
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned = self._assigned - gone
        if self._buf:  # fetched, not handled: the partitions' next owner reads them (in place:
            # batches() holds the deque)
            keep = [m for m in self._buf if (m.topic(), m.partition()) not in gone]
            self._buf.clear()
            self._buf.extend(keep)
        for tp in partitions:
            self._next.pop((tp.topic, tp.partition), None)
            self._chunks.forget(tp.partition)
        # Samples of those partitions held in groups not released yet: the next owner reads
        # them again from the last commit (never past them), with the rest of their group.
        # Kept, they would leave here as a partial group at group_timeout; kept in the
        # dedupe window, they would be dropped as copies if the partition came back here.
        for pid in list(self._groups):
            g = self._groups[pid]
            keep = [m for m in g[1] if m[1][:2] not in gone]
            if len(keep) == len(g[1]):
                continue
            for m in g[1]:
                if m[1][:2] in gone:
                    self._window.pop(m[0]["trajectory_id"], None)
            if keep:
                g[1] = keep
            else:
                del self._groups[pid]

    def _fetch(self, timeout):
        """Fills the buffer: what librdkafka already holds, in bulk (one call for up to _BULK
        messages, not one each); when it holds nothing, waits up to `timeout` for one message
        (consume with a timeout would wait the whole timeout for a full bulk). A rebalance in
        either call may drop buffered samples and groups (_on_revoke)."""
        with self._lock:
            self._buf.extend(self._consumer.consume(num_messages=_BULK, timeout=0))
            if not self._buf:
                msg = self._consumer.poll(timeout)
                if msg is not None:
                    self._buf.append(msg)

    def _poll(self, timeout):
        """One sample that passed the filters, as (sample, (topic, partition, offset)), or None."""
        if not self._buf:
            self._fetch(timeout)
        return self._admit(self._buf.popleft()) if self._buf else None

    def _admit(self, msg):
        """A fetched message as (sample, (topic, partition, offset)) when it holds a sample that
        passed the filters (a stale one marked "_skipped"); None for the end of a partition, a
        topic not created yet, a chunk of a sample still incomplete, an undecodable record (counted)
        or a duplicate (counted)."""
        err = msg.error()
        if err is not None:
            code = err.code()
            if code == KafkaError._PARTITION_EOF:
                return None
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                # The trainer started before the processor created the topic: wait for it.
                if not self._waiting_for_topic:
                    log.warning("topic %s does not exist yet; waiting for it (creditflow run --create-topics "
                                "creates it)", self.topic)
                    self._waiting_for_topic = True
                return None
            raise KafkaException(err)
        if self._waiting_for_topic:
            log.warning("topic %s exists now; reading it", self.topic)
            self._waiting_for_topic = False
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        self._next[(topic, partition)] = offset + 1
        # A message whose value decodes as a whole framed Sample is one (its headers are not
        # read: confluent-kafka makes them into Python objects on the first call,
        # docs/performance-passes.md, twenty-third pass); only the others may be chunks (docs/wire-format.md, "Records larger than one
        # message": a first chunk is a strict prefix of a record and never decodes; a later one
        # would have to begin with a record's header and fingerprint and decode to its end).
        value, first = msg.value(), offset
        if value is None:  # a null value (a tombstone): no sample, no chunk
            self.undecodable += 1
            return None
        try:
            s = decode_sample(value)
        except WireError:
            s = None
        if s is None:
            headers = msg.headers()  # none, a producer's own (creditflow-schema), or a chunk's
            if not any(k == CHUNK for k, _ in headers or ()):
                self.undecodable += 1
                return None
            # the reassembler puts it together
            rec, broken = self._chunks.add(partition, offset, msg.key(), value, headers)
            self.broken_chunks += len(broken)
            if rec is None:
                return None
            value, first = rec["value"], rec["first"]  # a chunked sample is pending from its first chunk on
            try:
                s = decode_sample(value)
            except WireError:
                self.undecodable += 1
                return None
        tid = s["trajectory_id"]
        window = self._window
        if tid in window:
            window.move_to_end(tid)
            self.duplicates += 1
            return None
        window[tid] = True
        if len(window) > self._window_size:
            window.popitem(last=False)
        if self.max_policy_lag is not None:
            newest = self._policy.version
            if newest is not None and newest - s["policy_version"] > self.max_policy_lag:
                self.stale += 1
                s["_skipped"] = True
        return s, (topic, partition, first)

    def poll(self, timeout=1.0):
        """The next fresh, non-duplicate sample, or None when none arrived within `timeout`."""
        end = time.monotonic() + timeout
        while True:
            r = self._poll(max(0.0, end - time.monotonic()))
            if r is not None and not r[0].get("_skipped"):
                self.yielded += 1
                return r[0]
            if time.monotonic() >= end:
                return None

    def __iter__(self):
        last = time.monotonic()
        while True:
            s = self.poll(0.5)
            if s is not None:
                last = time.monotonic()
                yield s
            elif self.idle_timeout is not None and time.monotonic() - last > self.idle_timeout:
                return

    def batches(self, n, whole_groups=True, max_wait=None):
        """Yields lists of at least `n` samples; smaller only when iteration ends
        (idle_timeout) or, with `max_wait`, when a non-empty batch has waited that many
        seconds for more. With whole_groups, a prompt's samples are kept together: a group
        is released once group_size of its members arrived (stale members skipped count),
        or `group_timeout` seconds after its first member (a partial group)."""
        if not whole_groups:
            batch, since = [], None
            last = time.monotonic()
            while True:
                s = self.poll(0.5)
                now = time.monotonic()
                if s is not None:
                    batch.append(s)
                    last = now
                    since = since or now
                if batch and (len(batch) >= n or (max_wait is not None and now - since >= max_wait)):
                    yield batch
                    batch, since = [], None
                if s is None and self.idle_timeout is not None and now - last > self.idle_timeout:
                    if batch:
                        yield batch
                    return
        groups, buf = self._groups, self._buf
        popleft, admit, monotonic = buf.popleft, self._admit, time.monotonic
        batch, since = [], None
        last = monotonic()

        def release(pid, now):
            nonlocal since
            k = len(batch)
            for s, _, skipped in groups.pop(pid)[1]:
                if not skipped:
                    batch.append(s)
            self.yielded += len(batch) - k
            if batch:
                since = since or now

        while True:
            if not buf:
                # Wait no longer than a pending batch may (max_wait), so that it leaves on time.
                self._fetch(0.5 if not batch or max_wait is None else min(0.5, max(0.0, since + max_wait - monotonic())))
            # What was fetched, message by message; the clock read once per fetch (the bulk
            # is what librdkafka already held, handled in well under a millisecond a sample).
            now, admitted = monotonic(), False
            while buf:
                r = admit(popleft())
                if r is None:
                    continue
                admitted = True
                s = r[0]
                pid = s["prompt_id"]
                g = groups.get(pid)
                if g is None:
                    g = groups[pid] = [now, []]
                members = g[1]
                members.append((s, r[1], "_skipped" in s))  # stale members count toward the group
                if len(members) >= members[0][0]["group_size"]:  # only this group can have completed
                    release(pid, now)
                    if len(batch) >= n:
                        yield batch
                        batch, since = [], None
                        now = monotonic()  # the trainer's step took its time
            if admitted:
                last = now
            while groups:  # partial groups time out oldest first
                pid, g = next(iter(groups.items()))
                if now - g[0] <= self.group_timeout:
                    break
                release(pid, now)
            if batch and (len(batch) >= n or (max_wait is not None and now - since >= max_wait)):
                yield batch
                batch, since = [], None
            if not admitted and self.idle_timeout is not None and now - last > self.idle_timeout:
                for pid in list(groups):
                    release(pid, now)
                if batch:
                    yield batch
                return

    def commit(self):
        """Commits synchronously what has been yielded (and skipped) so far: per partition,
        up to the first sample still held in batches()'s open groups."""
        held = {}  # (topic, partition) -> the first offset held
        for _, members in self._groups.values():
            for _, (t, p, o), skipped in members:
                if not skipped and o < held.get((t, p), o + 1):
                    held[(t, p)] = o
        offsets = []
        for (t, p), nxt in self._next.items():
            nxt = self._chunks.commit_offset(p, nxt)  # never past the first chunk of a sample being put together
            offsets.append(TopicPartition(t, p, min(nxt, held.get((t, p), nxt))))
        if offsets:
            with self._lock:
                self._consumer.commit(offsets=offsets, asynchronous=False)

    def close(self):
        """Leaves the consumer group: its other readers take over this reader's partitions at
        once, and uncommitted samples are redelivered to them. Called again, does nothing."""
        self._closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
