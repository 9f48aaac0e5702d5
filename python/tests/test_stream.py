"""SampleStream's bookkeeping (dedupe, whole groups, stale skips, what commit() commits)
against a scripted consumer; the real broker runs in the Go end-to-end tests."""

import time
import unittest
from unittest import mock

try:
    import confluent_kafka  # noqa: F401
    from creditflow import kafka, stream
except ImportError:
    kafka = stream = None

from creditflow import chunks, wire

from .util import sample_datum


class Msg:
    def __init__(self, partition, offset, value, topic="creditflow.samples", headers=None, key=None):
        self._t, self._p, self._o, self._v = topic, partition, offset, value
        self._h, self._k, self.header_reads = headers, key, 0

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def key(self):
        return self._k

    def headers(self):
        self.header_reads += 1
        return self._h

    def error(self):
        return None


class Revoke:
    """A scripted rebalance: the consumer calls the stream's on_revoke with these partitions."""

    def __init__(self, *partitions, topic="creditflow.samples"):
        self.partitions = [kafka.TopicPartition(topic, p) for p in partitions]


class Assign(Revoke):
    """A scripted rebalance: the consumer calls the stream's on_assign with these partitions."""


class ScriptedConsumer:
    def __init__(self, conf):
        self.conf, self.queue, self.commits, self.closed = conf, [], [], 0

    def subscribe(self, topics, on_assign=None, on_revoke=None):
        self.topics, self.on_assign, self.on_revoke = topics, on_assign, on_revoke

    def _rebalance(self):
        while self.queue and isinstance(self.queue[0], Revoke):
            r = self.queue.pop(0)
            (self.on_assign if isinstance(r, Assign) else self.on_revoke)(self, r.partitions)

    def poll(self, timeout):
        self._rebalance()
        if self.queue:
            return self.queue.pop(0)
        time.sleep(min(timeout, 0.005))
        return None

    def consume(self, num_messages=1, timeout=-1):
        self._rebalance()
        n = next((i for i, m in enumerate(self.queue[:num_messages]) if isinstance(m, Revoke)), num_messages)
        out, self.queue = self.queue[:n], self.queue[n:]
        if not out and timeout:
            time.sleep(min(timeout, 0.005))
        return out

    def commit(self, offsets=None, asynchronous=True):
        self.commits.append(sorted((tp.partition, tp.offset) for tp in offsets))

    def close(self):
        self.closed += 1


def sample(tid, pid, group_size=2, version=5):
    d = sample_datum(8, seed=1)
    d.update(trajectory_id=tid, prompt_id=pid, group_size=group_size, policy_version=version)
    return wire.codec("Sample").encode(d)


class FakePolicy:
    def __init__(self, version):
        self.version = version

    def close(self):
        pass


@unittest.skipIf(kafka is None, "confluent-kafka not installed")
class Stream(unittest.TestCase):
    def stream(self, msgs, **kw):
        with mock.patch.object(stream, "Consumer", ScriptedConsumer):
            s = stream.SampleStream("127.0.0.1:1", "g", idle_timeout=0.2, **kw)
        s._consumer.queue.extend(msgs)
        return s

    def test_iteration_drops_copies(self):
        s = self.stream([Msg(0, 0, sample("a", "p")), Msg(1, 0, sample("b", "p")), Msg(0, 1, sample("a", "p"))])
        self.assertEqual([x["trajectory_id"] for x in s], ["a", "b"])
        self.assertEqual((s.duplicates, s.yielded), (1, 2))
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, 2), (1, 1)])

    def test_dedupe_window_is_bounded(self):
        s = self.stream([Msg(0, i, sample(t, "p")) for i, t in enumerate(["a", "b", "c", "a"])], dedupe_window=2)
        self.assertEqual([x["trajectory_id"] for x in s], ["a", "b", "c", "a"])  # "a" left the window

    def test_whole_groups_and_commit_stops_at_buffered_samples(self):
        s = self.stream([Msg(0, 0, sample("A0", "A")), Msg(1, 0, sample("B0", "B")),
                         Msg(0, 1, sample("B1", "B")), Msg(1, 1, sample("A1", "A"))])
        it = s.batches(2)
        first = next(it)
        self.assertEqual([x["trajectory_id"] for x in first], ["B0", "B1"])
        s.commit()
        # A0 (partition 0, offset 0) is still buffered: partition 0 is committed only up to it.
        self.assertEqual(s._consumer.commits[-1], [(0, 0), (1, 1)])
        second = next(it)
        self.assertEqual(sorted(x["trajectory_id"] for x in second), ["A0", "A1"])
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, 2), (1, 2)])
        self.assertEqual(list(it), [])

    def test_partial_group_is_released_after_group_timeout(self):
        s = self.stream([Msg(0, 0, sample("A0", "A", group_size=3))], group_timeout=0.05)
        s.idle_timeout = 5
        it = s.batches(1)
        self.assertEqual([x["trajectory_id"] for x in next(it)], ["A0"])

    def test_stale_samples_are_skipped_counted_and_complete_their_group(self):
        s = self.stream([Msg(0, 0, sample("A0", "A", version=1)), Msg(0, 1, sample("A1", "A", version=4)),
                         Msg(0, 2, sample("B0", "B", group_size=1, version=5))])
        s.max_policy_lag, s._policy = 1, FakePolicy(5)
        got = [x["trajectory_id"] for b in s.batches(1) for x in b]
        self.assertEqual(got, ["A1", "B0"])
        self.assertEqual(s.stale, 1)
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, 3)])

    def test_max_wait_releases_a_small_batch(self):
        s = self.stream([Msg(0, 0, sample("A0", "A", group_size=1))])
        s.idle_timeout = 1
        it = s.batches(10, max_wait=0.05)
        self.assertEqual([x["trajectory_id"] for x in next(it)], ["A0"])
        # Released by max_wait, not by the end of iteration: the stream goes on.
        s._consumer.queue.append(Msg(0, 1, sample("B0", "B", group_size=1)))
        self.assertEqual([x["trajectory_id"] for x in next(it)], ["B0"])

    def test_a_revoked_partition_leaves_no_partial_group_behind(self):
        # Group A's first member was read from partition 0, which then went to another reader
        # (a trainer joined): A is that reader's now, whole; here it must not leave as a
        # partial group at group_timeout.
        s = self.stream([Msg(0, 0, sample("A0", "A")), Msg(1, 0, sample("B0", "B")), Revoke(0),
                         Msg(1, 1, sample("B1", "B"))], group_timeout=0.1)
        s.idle_timeout = 0.5
        self.assertEqual([[x["trajectory_id"] for x in b] for b in s.batches(1)], [["B0", "B1"]])
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(1, 2)])

    def test_a_partition_that_comes_back_is_read_again_whole(self):
        # An eager rebalance revokes every partition and assigns some back: the samples held
        # in unreleased groups are read again from the last commit, and are not copies.
        s = self.stream([Msg(0, 0, sample("A0", "A")), Msg(1, 0, sample("B0", "B")), Revoke(0, 1),
                         Msg(0, 0, sample("A0", "A")), Msg(0, 1, sample("A1", "A")),
                         Msg(1, 0, sample("B0", "B")), Msg(1, 1, sample("B1", "B"))], group_timeout=10)
        got = [sorted(x["trajectory_id"] for x in b) for b in s.batches(1)]
        self.assertEqual(got, [["A0", "A1"], ["B0", "B1"]])
        self.assertEqual((s.duplicates, s.yielded), (0, 4))
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, 2), (1, 2)])

    def test_a_revoke_drops_buffered_messages_in_place(self):
        # batches() holds the buffer between fetches: a revoke must drop the partition's
        # fetched messages from that same deque, not from a new one
        s = self.stream([])
        buf = s._buf
        buf.extend([Msg(0, 0, sample("A0", "A")), Msg(1, 0, sample("B0", "B")), Msg(0, 1, sample("A1", "A"))])
        s._on_revoke(s._consumer, [kafka.TopicPartition("creditflow.samples", 0)])
        self.assertIs(s._buf, buf)
        self.assertEqual([(m.partition(), m.offset()) for m in buf], [(1, 0)])

    def test_chunked_samples_between_whole_ones(self):
        # docs/wire-format.md, "Records larger than one message": a sample written as chunks
        # (the processor's headers on every chunk) with whole samples between its chunks; the
        # whole ones are read without their headers, the chunks by them
        own = [("creditflow-schema", b"Sample")]
        big = sample("C0", "C", group_size=3)
        parts = chunks.split(b"C", big, own, chunk_bytes=100)
        self.assertGreaterEqual(len(parts), 3)
        whole = [Msg(0, 1, sample("C1", "C", group_size=3), headers=own),
                 Msg(0, 3, sample("C2", "C", group_size=3), headers=own)]
        chunk_msgs = [Msg(0, o, v, headers=h, key=k) for o, (k, v, h) in zip([0, 2] + list(range(4, 4 + len(parts))), parts)]
        msgs = sorted(whole + chunk_msgs, key=lambda m: m.offset())
        s = self.stream(msgs)
        it = s.batches(1)
        got = next(it)
        self.assertEqual(sorted(x["trajectory_id"] for x in got), ["C0", "C1", "C2"])
        c0 = next(x for x in got if x["trajectory_id"] == "C0")
        self.assertEqual(c0["tokens"].tobytes(), wire.decode_sample(big)["tokens"].tobytes())
        self.assertEqual([m.header_reads for m in whole], [0, 0])
        self.assertTrue(all(m.header_reads == 1 for m in chunk_msgs))
        self.assertEqual((s.undecodable, s.broken_chunks), (0, 0))
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, msgs[-1].offset() + 1)])

    def test_an_unfinished_chunked_sample_holds_the_commit(self):
        own = [("creditflow-schema", b"Sample")]
        parts = chunks.split(b"C", sample("C0", "C", group_size=1), own, chunk_bytes=100)
        msgs = [Msg(0, 0, parts[0][1], headers=parts[0][2]), Msg(0, 1, sample("D0", "D", group_size=1), headers=own)]
        s = self.stream(msgs)
        self.assertEqual([x["trajectory_id"] for x in next(s.batches(1))], ["D0"])
        s.commit()
        self.assertEqual(s._consumer.commits[-1], [(0, 0)])  # never past the first chunk

    def test_undecodable_messages_are_counted(self):
        # a message that is neither a sample nor a chunk: its headers are looked at, then it is counted
        m = Msg(0, 0, b"\xc3\x01not a sample", headers=[("creditflow-schema", b"Sample")])
        s = self.stream([m, Msg(0, 1, sample("A0", "A", group_size=1))])
        self.assertEqual([x["trajectory_id"] for x in s], ["A0"])
        self.assertEqual((s.undecodable, m.header_reads), (1, 1))

    def test_a_null_value_is_counted_not_raised(self):
        s = self.stream([Msg(0, 0, None), Msg(0, 1, sample("A0", "A", group_size=1))])
        self.assertEqual([x["trajectory_id"] for x in s], ["A0"])
        self.assertEqual(s.undecodable, 1)

    def test_assignment_follows_the_rebalances(self):
        s = self.stream([Assign(0, 1, 2), Revoke(0, 1, 2), Assign(2, 3)])
        s.poll(0.01)
        self.assertEqual(s.assignment(), [("creditflow.samples", 2), ("creditflow.samples", 3)])
        s._consumer.queue.append(Revoke(3))
        s.poll(0.01)
        self.assertEqual(s.assignment(), [("creditflow.samples", 2)])

    def test_close_leaves_the_group_once(self):
        s = self.stream([])
        with s:
            pass
        s.close()
        self.assertEqual(s._consumer.closed, 1)

    def test_an_unreferenced_stream_leaves_the_group(self):
        # Without close(): the stream and its consumer form no cycle, so dropping the last
        # reference closes the consumer (the interpreter's exit does the same, atexit).
        s = self.stream([])
        consumer = s._consumer
        del s
        self.assertEqual(consumer.closed, 1)


@unittest.skipIf(kafka is None, "confluent-kafka not installed")
class Watcher(unittest.TestCase):
    def test_maximum_version_tombstones_and_bad_values(self):
        import creditflow
        changes = []
        with mock.patch.object(kafka, "Consumer", ScriptedConsumer):
            w = kafka.PolicyWatcher("127.0.0.1:1", on_change=changes.append)
        for i, v in enumerate([creditflow.encode_policy(5, "/c/5"), None, creditflow.encode_policy(3, "/c/3"),
                               b"\xc3\x01garbage!", creditflow.encode_policy(7)]):
            w._handle(Msg(0, i, v, topic="creditflow.policy"))
        self.assertEqual((w.version, w.checkpoint, w.bad), (7, "", 1))
        self.assertEqual([a["version"] for a in changes], [5, 7])

    def test_refuses_other_records(self):
        # The scorer pod (scorer/gpupod/cfpod/follow.py) follows announcements with this watcher.
        import creditflow
        errors = []
        with mock.patch.object(kafka, "Consumer", ScriptedConsumer):
            w = kafka.PolicyWatcher("127.0.0.1:1")
        w._on_bad = errors.append
        b = creditflow.encode_policy(3, "x", 1)
        bads = (b[:-1], b + b"\x00", b[:2] + bytes(8) + b[10:], wire.codec("Sample").header + b[10:])
        for v in bads:
            w.handle(v)
        self.assertEqual((w.version, w.bad, len(errors)), (None, len(bads), len(bads)))
        self.assertTrue(all(isinstance(e, wire.WireError) for e in errors), errors)
        for v, ck in ((0, ""), (7, "/ckpt/7"), (1 << 40, "s3://bucket/\u00fc")):
            w.handle(creditflow.encode_policy(v, ck, 1764500000000))
            self.assertEqual((w.version, w.checkpoint), (v, ck))


if __name__ == "__main__":
    unittest.main()
