"""Decode speed of creditflow's own Avro decoder against fastavro and avro, same run,
same records.

  PYTHONPATH=python python/tests/bench_decode.py   # with the project's interpreter

For each size: a Sample of N tokens (8 turns of diagnostics), decoded to numpy arrays by
creditflow.decode_sample (the compiled decoder where it can be had: docs/python.md), by the
package's generated Python decoder alone (python_us), by fastavro (creditflow._fastavro.decode_sample: schemaless_reader,
then np.frombuffer on each packed field) and by avro's DatumReader followed by
np.frombuffer on each packed field (the cheapest a avro user can do). Prints
microseconds per record (best of 5 rounds) and each library's time over the own decoder's. A
library that is not installed is left out (avro: also the encoding table).
"""

import io
import sys
import time

import numpy as np

import creditflow
from creditflow import wire

from tests.util import avro as _avro, sample_datum


def best(fn, n):
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t.append((time.perf_counter() - t0) / n)
    return min(t)


def main():
    try:
        from creditflow import _fastavro
    except ImportError:
        _fastavro = None
    if _avro is not None:
        import avro.io
        import avro.schema
        reader = avro.io.DatumReader(avro.schema.parse(wire.schema_text("Sample")))

    def with_avro(v):
        d = reader.read(avro.io.BinaryDecoder(io.BytesIO(v[10:])))
        for f, dt in (("tokens", "<i4"), ("loss_mask", "u1"), ("advantages", "<f4"), ("rollout_logprobs", "<f4")):
            d[f] = np.frombuffer(d[f], dtype=dt)
        return d

    from creditflow import _native
    from creditflow._avro_fast import compile_decoder
    cur = wire.codec("Sample").current
    in_python = compile_decoder(cur.json, cur.json, cur.packed, whole=True, native=False)
    print("decode_sample: %s" % ("compiled (creditflow._cdecode)" if _native.module() else "Python (no compiled decoder)"))
    print("%8s %10s %12s %12s %8s %12s %8s %12s %8s" % ("tokens", "bytes", "own_us", "python_us", "ratio", "fastavro_us",
                                                       "ratio", "avro_us", "ratio"))
    for n in (1024, 4096, 8192, 16384, 32768):
        d = sample_datum(n, seed=n)
        d["turns"] = d["turns"] * 4
        v = wire.codec("Sample").encode(d)
        a = creditflow.decode_sample(v)
        reps = max(20, 200000 // n)
        own = best(lambda: creditflow.decode_sample(v), reps)
        py = best(lambda: in_python(v, memoryview(v), 10), reps)
        fa = ref = float("nan")
        if _fastavro is not None:
            b = _fastavro.decode_sample(v)
            assert (a["tokens"] == b["tokens"]).all() and a["turns"] == b["turns"]
            fa = best(lambda: _fastavro.decode_sample(v), reps)
        if _avro is not None:
            b = with_avro(v)
            assert (a["tokens"] == b["tokens"]).all() and a["turns"] == b["turns"]
            ref = best(lambda: with_avro(v), reps)
        print("%8d %10d %12.1f %12.1f %8.1f %12.1f %8.1f %12.1f %8.1f" % (n, len(v), own * 1e6, py * 1e6, py / own, fa * 1e6,
                                                                      fa / own, ref * 1e6, ref / own))
    if _avro is None:
        return 0

    # Encoding a trajectory of N tokens (8 turns) from numpy arrays: creditflow.encode_trajectory
    # against avro's DatumWriter on the same packed datum.
    import random
    writer = avro.io.DatumWriter(avro.schema.parse(wire.schema_text("Trajectory")))
    print("\n%8s %10s %12s %12s %8s" % ("tokens", "bytes", "enc_own_us", "enc_avro_us", "ratio"))
    for n in (1024, 8192, 32768):
        rng = np.random.default_rng(n)
        per = n // 17
        turns = [("search" if k < 7 else "answer", rng.integers(0, 151936, per), rng.integers(0, 151936, per))
                 for k in range(8)]
        t = creditflow.build_trajectory(trajectory_id="t", prompt_id="p", group_size=8, sample_index=0,
                                        prompt_ids=rng.integers(0, 151936, n - 16 * per), turns=turns,
                                        policy_version=1, reward=1.0,
                                        rollout_logprobs=-rng.random(8 * per), created_at_ms=1)
        v = creditflow.encode_trajectory(t, "current")
        datum = wire.codec("Trajectory").current.decode_body(v, 10)[0]
        datum = {k: (bytes(x) if isinstance(x, memoryview) else x) for k, x in datum.items()}
        datum["turns"] = [{k: (bytes(x) if isinstance(x, memoryview) else x) for k, x in tu.items()} for tu in datum["turns"]]

        def with_avro():
            buf = io.BytesIO()
            buf.write(wire.MAGIC + wire.codec("Trajectory").current.fingerprint)
            writer.write(datum, avro.io.BinaryEncoder(buf))
            return buf.getvalue()
        assert with_avro() == v
        reps = max(20, 100000 // n)
        own = best(lambda: creditflow.encode_trajectory(t, "current"), reps)
        ref = best(with_avro, reps)
        print("%8d %10d %12.1f %12.1f %8.1f" % (n, len(v), own * 1e6, ref * 1e6, ref / own))
    return 0


if __name__ == "__main__":
    sys.exit(main())
