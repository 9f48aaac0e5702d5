"""The package's own Avro codec against fastavro (creditflow._fastavro), for every record and
every writer-schema generation the package reads: random records encode to the bytes fastavro
writes and decode to what fastavro reads, and decode_sample gives what the fastavro path gives.

fastavro is in the project's environment (python/requirements.lock); outside CI these tests
skip without it, under CI=true its absence fails them.
"""

import glob
import io
import json
import os
import random
import struct
import unittest

import numpy as np

import creditflow
from creditflow import wire

from .util import sample_datum

try:
    import fastavro

    from creditflow import _fastavro
except ImportError:
    if os.environ.get("CI") == "true":
        raise
    fastavro = _fastavro = None

NAMES = ("Trajectory", "Scored", "Sample", "DeadLetter", "PolicyAnnouncement")
TESTDATA = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "testdata")


def random_datum(node, rng, named):
    """A random value of Avro schema node (parsed JSON): every branch and length class the
    codecs treat apart (nulls, empty and long arrays, one-, two- and three-byte lengths, the
    int and long extremes, non-ASCII strings)."""
    if isinstance(node, str):
        if node in named:
            return random_datum(named[node], rng, named)
        node = {"type": node}
    if isinstance(node, list):
        return None if rng.random() < 0.4 else random_datum(node[1], rng, named)
    t = node["type"]
    if t == "record":
        named[node["name"]] = node
        return {f["name"]: random_datum(f["type"], rng, named) for f in node["fields"]}
    if t == "array":
        return [random_datum(node["items"], rng, named) for _ in range(rng.choice((0, 1, 2, 5, 70)))]
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t == "int":
        return rng.choice((0, -1, 63, -64, 64, 8191, -(1 << 31), (1 << 31) - 1, rng.randrange(-(1 << 31), 1 << 31)))
    if t == "long":
        return rng.choice((0, 1, -1, 1764500000000, -(1 << 63), (1 << 63) - 1, rng.randrange(-(1 << 63), 1 << 63)))
    if t == "float":  # a float32 value, as both codecs write it
        return struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0]
    if t == "double":
        return rng.choice((0.0, -0.0, 1e-300, -1e300, rng.uniform(-5, 5)))
    if t == "bytes":
        return rng.randbytes(rng.choice((0, 3, 64, 300, 9000)))
    if t == "string":
        return "".join(rng.choice("ab-_0Zé中🙂") for _ in range(rng.choice((0, 1, 10, 70))))
    raise ValueError(t)


def plain(x):
    """x with memoryviews as bytes (the package's decoder returns memoryviews for bytes)."""
    if isinstance(x, memoryview):
        return bytes(x)
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [plain(v) for v in x]
    return x


@unittest.skipIf(fastavro is None, "fastavro not installed (pip install -r python/requirements.lock)")
class AgainstFastavro(unittest.TestCase):
    def generations(self, name):
        c = wire.codec(name)
        return [(gen, s) for gen, s in c.writers.items()]

    def test_every_generation_has_a_fastavro_reader(self):
        self.assertEqual(sorted(g or "" for g, _ in self.generations("Sample")), ["", wire.LEGACY])
        self.assertEqual(sorted(g or "" for g, _ in self.generations("Scored")), ["", "8017725", wire.LEGACY, "e4323a4"])
        for name in NAMES:
            r = _fastavro.Reader(name)
            self.assertEqual(set(r._schemas), set(wire.codec(name).readers), name)

    def test_random_records_every_name_and_generation(self):
        rng = random.Random(38)
        count = 0
        for name in NAMES:
            for gen, s in self.generations(name):
                parsed = fastavro.parse_schema(json.loads(s.text))
                for _ in range(25):
                    d = random_datum(json.loads(s.text), rng, {})
                    v = wire.codec(name).encode(d, gen)
                    fo = io.BytesIO()
                    fastavro.schemaless_writer(fo, parsed, d)
                    self.assertEqual(v[10:], fo.getvalue(), (name, gen))  # same bytes as fastavro writes
                    mine = plain(wire.codec(name).decode(v))
                    ref = _fastavro.decode(name, v)
                    self.assertEqual(mine, ref, (name, gen))
                    # resolved to the current schema: the fields the writer lacks take their defaults
                    self.assertEqual(list(mine), [f["name"] for f in wire.codec(name).current.json["fields"]])
                    count += 1
        self.assertGreater(count, 200)

    def test_golden_records(self):
        by_fp = {}
        for name in NAMES:
            for fp in wire.codec(name).readers:
                by_fp[fp] = name
        files = sorted(glob.glob(os.path.join(TESTDATA, "v*", "*.hex")))
        if not files:
            self.skipTest("not run from a repository checkout")
        seen = set()
        for path in files:
            with open(path) as f:
                for line in f.read().split():
                    v = bytes.fromhex(line)
                    name = by_fp.get(v[2:10])
                    if name is None:  # the .sha256.hex files hold digests, not records
                        continue
                    seen.add((name, v[2:10]))
                    self.assertEqual(plain(wire.codec(name).decode(v)), _fastavro.decode(name, v), path)
        self.assertGreaterEqual(len(seen), 6, seen)  # v1 of every record, Scored of v2 and v3

    def test_decode_sample_random(self):
        rng = random.Random(5)
        for i in range(200):
            n = rng.choice((0, 1, 7, 1300, 4097))
            current = rng.random() < 0.7
            d = sample_datum(n, seed=i, current=current, ppo=rng.random() < 0.3)
            d["turns"] = [rng.choice(d["turns"]) for _ in range(rng.choice((0, 1, 3, 30)))]
            for f in ("rollout_logprobs", "temperature") + (("scorer_policy_version", "source") if current else ()):
                if rng.random() < 0.3:
                    d[f] = None
            v = wire.codec("Sample").encode(d, None if current else wire.LEGACY)
            a, b = creditflow.decode_sample(v), _fastavro.decode_sample(v)
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                if isinstance(a[k], np.ndarray):
                    self.assertEqual(a[k].dtype, b[k].dtype, k)
                    self.assertFalse(b[k].flags.writeable, k)
                    np.testing.assert_array_equal(a[k], b[k], k)
                else:
                    self.assertEqual(a[k], b[k], k)

    def test_refusals_name_the_same_reason(self):
        v = wire.codec("Sample").encode(sample_datum(40, seed=2))
        bad_len = sample_datum(10, seed=1)
        bad_len["advantages"] = bad_len["advantages"][:-4]
        cases = {
            "undecodable": [v[:5], b"\x00\x01" + v[2:], v[:-3], v + b"\x00", wire.codec("Sample").encode(bad_len)],
            "unknown_schema": [v[:2] + b"\x00" * 8 + v[10:], wire.codec("Trajectory").header + v[10:]],
        }
        for reason, values in cases.items():
            for x in values:
                for decode in (creditflow.decode_sample, _fastavro.decode_sample):
                    with self.assertRaises(creditflow.WireError) as cm:
                        decode(x)
                    self.assertEqual(cm.exception.reason, reason, (decode.__module__, x[:12].hex()))


if __name__ == "__main__":
    unittest.main()
