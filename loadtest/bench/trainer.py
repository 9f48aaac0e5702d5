"""The trainer's end of `loadtest bench` (docs/performance.md, Method): reads the samples
topic with the creditflow Python package as a trainer does (SampleStream.batches, then
to_torch, or to_numpy without torch), with a bare confluent_kafka consumer that only
polls the same records, and with the trainer's floor (below), in turns, and prints one JSON
object.

The floor is a reader whose decoding costs nothing: the bare consumer's loop, plus the
least a Python trainer must do with each record, which is to view its arrays (np.frombuffer at
offsets found by an untimed first reading) and build the same tensors from them (to_torch or
to_numpy, batches of BATCH in arrival order: no grouping, no duplicate or policy checks). What
separates it from the bare consumer is building the tensors; what separates the trainer from
it is the package's decoding and bookkeeping.

Where fastavro is installed, a fourth reader is the same trainer with fastavro decoding each
sample instead of the package's own decoder (creditflow._fastavro.decode_sample): the
well-kept library measured against the hand-written one, same records, same run.

  python3 trainer.py BROKERS TOPIC RECORDS REPEAT BATCH GROUP_PREFIX

Each reader runs once per round, at least REPEAT rounds and enough for 20,000 samples a reader
(at most 10); the rates pool the rounds, and each round's trainer / floor is printed too.

A run's rate is its records over the time from the first record its consumer returned to
the end of the run (the last record read; for the trainer, the last full batch built: the
last, partial one would leave only after the stream's max_wait), so joining the consumer
group is left out of both, as the bench leaves it out of every phase. Over the same span, the
CPU time of the reading thread per record (time.thread_time: the interpreter's work, not
librdkafka's fetching threads) is the figure a loaded machine shifts least.
With CREDITFLOW_BENCH_PYPROFILE=FILE the first trainer run writes its cProfile there.
"""

import json
import os
import sys
import time

import numpy as np
from confluent_kafka import Consumer, KafkaError

import creditflow
from creditflow.batch import to_numpy
from creditflow.wire import decode_sample

try:
    from creditflow import _fastavro
except ImportError:
    _fastavro = None

try:
    from creditflow.batch import to_torch
    import torch  # noqa: F401  (to_torch imports it per call; fail here, once)
except ImportError:
    to_torch = None

TIMEOUT = 120.0
# Rounds: at least REPEAT, and as many as it takes each reader to read MIN_SAMPLES samples, at
# most MAX_ROUNDS. A run of a few thousand small samples lasts under 0.1 s and single runs of
# the same code spread widely (docs/performance.md, Method, item 9): the rounds pool them.
MIN_SAMPLES, MAX_ROUNDS = 20000, 10


class _Clock:
    """Wraps a consumer's consume and poll to note when it first returned records (the
    monotonic clock, and the CPU time of the reading thread)."""

    def __init__(self, consumer):
        self._c, self.first, self.first_cpu = consumer, None, None

    def consume(self, num_messages=1, timeout=-1):
        msgs = self._c.consume(num_messages=num_messages, timeout=timeout)
        if msgs and self.first is None:
            self.first, self.first_cpu = time.monotonic(), time.thread_time()
        return msgs

    def poll(self, timeout=-1):
        msg = self._c.poll(timeout)
        if msg is not None and self.first is None:
            self.first, self.first_cpu = time.monotonic(), time.thread_time()
        return msg

    def __getattr__(self, name):
        return getattr(self._c, name)


def _consumer(brokers, topic, group):
    """A consumer with librdkafka's defaults, subscribed to topic (the bare consumer's, the
    floor's and the layouts' reading), its first record timed."""
    c = _Clock(Consumer({"bootstrap.servers": brokers, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False}))
    c.subscribe([topic])
    return c


def bare(brokers, topic, n, group):
    c = _consumer(brokers, topic, group)
    got, nbytes, deadline = 0, 0, time.monotonic() + TIMEOUT
    while got < n:
        for msg in _take(c, n, "bare consumer", deadline):  # in bulk, as SampleStream takes them
            got += 1
            nbytes += len(msg.value())
    end, cpu = time.monotonic(), time.thread_time()
    c.close()
    return got, end - c.first, cpu - c.first_cpu, nbytes


def _take(c, n, what, deadline):
    """The next records of consumer c as the bare consumer takes them (in bulk; a blocking
    poll only when librdkafka holds nothing), errors other than end-of-partition raised."""
    msgs = c.consume(num_messages=256, timeout=0)
    if not msgs:
        msg = c.poll(0.5)
        msgs = [msg] if msg is not None else []
    if not msgs and time.monotonic() > deadline:
        raise TimeoutError("%s: fewer than %d records" % (what, n))
    out = []
    for msg in msgs:
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise RuntimeError(msg.error())
        out.append(msg)
    return out


_ARRAYS = (("tokens", np.int32), ("loss_mask", np.uint8), ("advantages", np.float32),
           ("token_rewards", np.float32), ("rollout_logprobs", np.float32))
_SCALARS = ("trajectory_id", "prompt_id", "policy_version", "scorer_policy_version", "reward", "outcome_advantage")


def layouts(brokers, topic, n, group):
    """{(partition, offset): (the scalar fields to_numpy reads, [(field, dtype, count, byte
    offset)])} for the topic's n samples, read once with the package's decoder (untimed); None
    when a sample came as chunks (the floor reads whole records only)."""
    c = _consumer(brokers, topic, group)
    out, deadline = {}, time.monotonic() + TIMEOUT
    try:
        while len(out) < n:
            for msg in _take(c, n, "trainer floor (layouts)", deadline):
                if msg.headers() and any(k == "creditflow-chunk" for k, _ in msg.headers()):
                    return None
                v = msg.value()
                s = decode_sample(v)
                base = np.frombuffer(v, np.uint8).ctypes.data
                arrays = [(f, dt, s[f].size, s[f].ctypes.data - base) for f, dt in _ARRAYS if s[f] is not None]
                out[(msg.partition(), msg.offset())] = ({k: s[k] for k in _SCALARS}, arrays)
    finally:
        c.close()
    return out


def floor(brokers, topic, n, group, batch, layout):
    """The bare consumer's loop plus views of each record's arrays and the tensors of each
    batch of `batch` records: a trainer whose decoding costs nothing."""
    c = _consumer(brokers, topic, group)
    convert = to_torch or to_numpy
    frombuffer = np.frombuffer
    got, tokens, b, deadline = 0, 0, [], time.monotonic() + TIMEOUT
    while got < n:
        for msg in _take(c, n, "trainer floor", deadline):
            v = msg.value()
            scalars, arrays = layout[(msg.partition(), msg.offset())]
            s = dict(scalars)
            for f, dt, count, off in arrays:
                s[f] = frombuffer(v, dt, count, off)
            b.append(s)
            got += 1
            if len(b) >= batch:
                tokens += int(convert(b)["lengths"].sum())
                b = []
    if b:
        tokens += int(convert(b)["lengths"].sum())
    end, cpu = time.monotonic(), time.thread_time()
    c.close()
    return got, end - c.first, cpu - c.first_cpu, tokens


def trainer(brokers, topic, n, group, batch, decode=None):
    """Reads n samples in batches. The topic holds n, rarely a multiple of the batch, so the
    last batch is smaller and leaves only after waiting the stream's max_wait for samples that
    never come: a setting of the trainer, not its speed. When the last batch is such a one, the
    run ends, uncounted, with the full batch before it. With decode, the stream decodes each
    sample with it instead of creditflow.decode_sample."""
    if decode is not None:
        import creditflow.stream as stream  # where SampleStream looks decode_sample up
        own, stream.decode_sample = stream.decode_sample, decode
        try:
            return trainer(brokers, topic, n, group, batch)
        finally:
            stream.decode_sample = own
    s = creditflow.SampleStream(brokers, group, topic=topic, idle_timeout=10.0)
    s._consumer = _Clock(s._consumer)
    convert = to_torch or to_numpy
    got, tokens, deadline = 0, 0, time.monotonic() + TIMEOUT
    full = (0, 0, None, None)  # got, tokens, end, CPU time after the last full batch
    for b in s.batches(batch, whole_groups=True, max_wait=0.2):
        t = convert(b)
        got += len(b)
        tokens += int(t["lengths"].sum())
        end, cpu = time.monotonic(), time.thread_time()
        if len(b) >= batch:
            full = (got, tokens, end, cpu)
        if got >= n or end > deadline:
            break
    if got < n:
        raise TimeoutError("trainer: %d of %d samples" % (got, n))
    if full[2] is not None and full[0] < got:
        got, tokens, end, cpu = full
    first, first_cpu = s._consumer.first, s._consumer.first_cpu
    s.close()
    return got, end - first, cpu - first_cpu, tokens


def main():
    brokers, topic, n, repeat, batch, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5]), sys.argv[6]
    creditflow.wire.codec("Sample")  # compiled once per process (start-up, not steady state)
    layout = layouts(brokers, topic, n, "%s.layouts" % prefix)
    # every record's tokens, which the floor's tensors must hold once per run
    layout_tokens = sum(a[0][2] for _, a in layout.values()) if layout is not None else 0
    # One untimed round first: each reader's first run in a process pays for memory that later
    # runs reuse (librdkafka's, the interpreter's, and the package's array pool, which the
    # trainer leaves holding two batches' arrays), as a trainer does once at start-up.
    bare(brokers, topic, n, "%s.consumer.warm" % prefix)
    trainer(brokers, topic, n, "%s.trainer.warm" % prefix, batch)
    if _fastavro is not None:
        trainer(brokers, topic, n, "%s.fastavro.warm" % prefix, batch, _fastavro.decode_sample)
    if layout is not None:
        floor(brokers, topic, n, "%s.floor.warm" % prefix, batch, layout)
    # per reader, over all rounds: records, seconds, CPU seconds of the reading thread
    runs = {k: [0, 0.0, 0.0] for k in ("consumer", "trainer", "floor", "fastavro")}
    nbytes = tokens = tokens_of = 0
    readers = ["trainer"] + (["fastavro"] if _fastavro is not None else []) + (["floor"] if layout is not None else [])
    by_round = {k: [] for k in readers}  # per reader, each round's rate
    rounds = max(repeat, min(MAX_ROUNDS, -(-MIN_SAMPLES // max(1, n))))
    for r in range(rounds):
        got, dt, cpu, nbytes = bare(brokers, topic, n, "%s.consumer.%d" % (prefix, r))
        runs["consumer"][0] += got
        runs["consumer"][1] += dt
        runs["consumer"][2] += cpu
        # the readers in turns, each round starting with the next one, so that none always
        # follows the same neighbour
        for k in range(len(readers)):
            what = readers[(r + k) % len(readers)]
            group = "%s.%s.%d" % (prefix, what, r)
            if what == "floor":
                got, dt, cpu, floor_tokens = floor(brokers, topic, n, group, batch, layout)
                if floor_tokens != layout_tokens:
                    raise RuntimeError("trainer floor: %d tokens in its tensors, the records hold %d" % (floor_tokens, layout_tokens))
            elif what == "fastavro":
                got, dt, cpu, _ = trainer(brokers, topic, n, group, batch, _fastavro.decode_sample)
            elif os.environ.get("CREDITFLOW_BENCH_PYPROFILE"):  # the trainer's profile (cProfile) of the first run
                import cProfile
                prof = cProfile.Profile()
                got, dt, cpu, tokens = prof.runcall(trainer, brokers, topic, n, group, batch)
                prof.dump_stats(os.environ.pop("CREDITFLOW_BENCH_PYPROFILE"))
                tokens_of = got
            else:
                got, dt, cpu, tokens = trainer(brokers, topic, n, group, batch)
                tokens_of = got
            runs[what][0] += got
            runs[what][1] += dt
            runs[what][2] += cpu
            by_round[what].append(got / dt)

    def rate(k):
        return runs[k][0] / runs[k][1] if runs[k][1] else 0

    def cpu_us(k):
        return runs[k][2] / runs[k][0] * 1e6 if runs[k][0] else 0

    print(json.dumps({
        "trainer_per_s": rate("trainer"), "trainer_consumer_per_s": rate("consumer"),
        "trainer_floor_per_s": rate("floor"), "trainer_fastavro_per_s": rate("fastavro"),
        "trainer_cpu_us_per_sample": cpu_us("trainer"), "trainer_consumer_cpu_us_per_sample": cpu_us("consumer"),
        "trainer_floor_cpu_us_per_sample": cpu_us("floor"), "trainer_fastavro_cpu_us_per_sample": cpu_us("fastavro"),
        "tensors": "torch" if to_torch else "numpy", "rounds": rounds,
        # trainer / floor of each round: the spread the pooled rates smooth
        "vs_floor_by_round": [round(t / f, 3) for t, f in zip(by_round["trainer"], by_round.get("floor", ()))],
        "sample_bytes": nbytes / max(1, n), "sample_tokens": tokens / max(1, tokens_of),
    }))

if __name__ == "__main__":
    main()
