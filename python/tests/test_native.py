"""The compiled decoder (creditflow._native, _cdecode.c) against the generated Python one:
the same values, of the same types, at the same positions, and the same bytes left to the
checking decoder, over every schema generation the package reads and mutated records."""

import os
import random
import subprocess
import sys
import unittest

import numpy as np

from creditflow import _native, wire
from creditflow._avro_fast import FALLBACK, _Fallback, compile_decoder

from tests.util import sample_datum

HERE = os.path.dirname(os.path.abspath(__file__))


def _native_or_skip(test):
    if _native.module() is None:
        if os.environ.get("CI") == "true":
            test.fail("the compiled decoder could not be built (CREDITFLOW_NATIVE=1 says why); CI needs it")
        test.skipTest("no compiled decoder here (a C compiler and Python's headers build it)")


def _same(test, a, b, where):
    """a and b equal and of the same types all the way down (numpy views: dtype, shape, the
    same bytes of the same buffer)."""
    test.assertIs(type(a), type(b), where)
    if isinstance(a, dict):
        test.assertEqual(list(a), list(b), where)  # the same keys in the same order
        for k in a:
            _same(test, a[k], b[k], "%s.%s" % (where, k))
    elif isinstance(a, (list, tuple)):
        test.assertEqual(len(a), len(b), where)
        for i, (x, y) in enumerate(zip(a, b)):
            _same(test, x, y, "%s[%d]" % (where, i))
    elif isinstance(a, np.ndarray):
        flags = ("writeable", "aligned", "c_contiguous", "owndata")
        test.assertEqual((a.dtype, a.shape, [getattr(a.flags, f) for f in flags]), (b.dtype, b.shape, [getattr(b.flags, f) for f in flags]),
                         where)
        test.assertIs(a.base, b.base, where)  # the decoded bytes object itself, kept alive by the view
        test.assertEqual(a.__array_interface__["data"][0], b.__array_interface__["data"][0], where)
        test.assertEqual(a.tobytes(), b.tobytes(), where)
    elif isinstance(a, memoryview):
        test.assertEqual(bytes(a), bytes(b), where)
    elif isinstance(a, float) and a != a:
        test.assertTrue(b != b, where)  # NaN
    else:
        test.assertEqual(a, b, where)


def _records():
    """(codec name, framed record) in every writer generation the package reads."""
    out = []
    for n in (0, 1, 8, 300, 3000):
        for ppo in (False, True):
            for current in (True, False):
                d = sample_datum(n, seed=n, ppo=ppo, current=current)
                out.append(("Sample", wire.codec("Sample").encode(d, None if current else wire.LEGACY)))
    p = os.path.join(HERE, "..", "..", "schemas", "testdata")
    for gen in sorted(os.listdir(p)) if os.path.isdir(p) else ():
        for f in sorted(os.listdir(os.path.join(p, gen))):
            if f.endswith(".hex"):
                with open(os.path.join(p, gen, f)) as fh:
                    out += [(None, bytes.fromhex(line)) for line in fh.read().split()[:4] if line.startswith("c301")]
    return out


def _schema(name, v):
    for n in ([name] if name else ["Trajectory", "Scored", "Sample", "DeadLetter", "PolicyAnnouncement"]):
        try:
            s = wire.codec(n).readers.get(v[2:10])
        except KeyError:
            continue
        if s is not None:
            return s
    return None


class NativeDecoder(unittest.TestCase):
    def setUp(self):
        _native_or_skip(self)

    def pairs(self, schema):
        """(native, Python) decoders of schema: plain, packed, whole."""
        packed = schema.packed
        out = [(compile_decoder(schema.json, schema.reader_json, native=True),
                compile_decoder(schema.json, schema.reader_json, native=False))]
        if packed:
            for whole in (False, True):
                out.append((compile_decoder(schema.json, schema.reader_json, packed, whole, native=True),
                            compile_decoder(schema.json, schema.reader_json, packed, whole, native=False)))
        return out

    @staticmethod
    def run_one(fn, b):
        try:
            return fn(b, memoryview(b), 10)
        except FALLBACK:
            return "fallback"

    def test_same_as_the_generated_decoder(self):
        # the views made with numpy's C API (where the module was built with its headers: always
        # under CI) and with numpy.frombuffer
        if os.environ.get("CI") == "true":
            self.assertTrue(_native.numpy_api, "built without numpy's headers, or its C API not importable")
        modes = (True, False) if _native.numpy_api else (False,)
        m = _native.module()
        try:
            for numpy_api in modes:
                with self.subTest(numpy_api=numpy_api):
                    self.assertEqual(m.init(_Fallback, np.frombuffer, numpy_api), numpy_api)
                    self.same_as_the_generated_decoder()
        finally:
            m.init(_Fallback, np.frombuffer, _native.numpy_api)

    def same_as_the_generated_decoder(self):
        rng = random.Random(11)
        recs = _records()
        self.assertGreater(len([1 for n, _ in recs if n is None]), 5, "the golden records of schemas/testdata")
        read = fell = 0
        for name, v in recs:
            schema = _schema(name, v)
            self.assertIsNotNone(schema, v[:10].hex())
            for native, python in self.pairs(schema):
                a, b = self.run_one(native, v), self.run_one(python, v)
                self.assertNotIsInstance(a, str, "a well-formed record")
                _same(self, a, b, schema.name)
                for _ in range(150):  # mutations: flipped bytes, cuts
                    m = bytearray(v)
                    for _ in range(rng.randint(1, 3)):
                        i = rng.randrange(10, len(m)) if len(m) > 10 else 10
                        if i < len(m):
                            m[i] = rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)))
                    if rng.random() < 0.3 and len(m) > 10:
                        m = m[:rng.randrange(10, len(m))]
                    m = bytes(m)
                    a, b = self.run_one(native, m), self.run_one(python, m)
                    if isinstance(a, str) or isinstance(b, str):
                        # both leave it to the checking decoder, or the compiled one leaves a
                        # varint past 64 bits to it that the Python one reads as a big int
                        self.assertIsInstance(a, str, "the compiled decoder read what the Python one refused")
                        fell += 1
                        if not isinstance(b, str):
                            self.assertTrue(_has_big_int(b[0]), b)
                        continue
                    _same(self, a, b, schema.name)
                    read += 1
        self.assertGreater(read, 100)
        self.assertGreater(fell, 100)

    def test_fields_the_reader_lacks(self):
        # a reader without the diagnostics: the compiled decoder reads past them checked (no
        # objects built), the Python one decodes and drops them; the same records accepted
        rng = random.Random(5)
        cur = wire.codec("Sample").current
        reader = dict(cur.json, fields=[f for f in cur.json["fields"] if f["name"] not in ("turns", "attnsr")])
        native = compile_decoder(cur.json, reader, cur.packed, True, native=True)
        python = compile_decoder(cur.json, reader, cur.packed, True, native=False)
        same = fell = 0
        for n in (0, 5, 300):
            v = wire.codec("Sample").encode(sample_datum(n, seed=n))
            a = self.run_one(native, v)
            self.assertNotIn("turns", a[0])
            _same(self, a, self.run_one(python, v), "Sample")
            for _ in range(400):
                m = bytearray(v)
                m[rng.randrange(10, len(m))] = rng.choice((0, 1, 2, 0x80, 0xFF, rng.randrange(256)))
                m = bytes(m)
                a, b = self.run_one(native, m), self.run_one(python, m)
                if isinstance(a, str) or isinstance(b, str):
                    self.assertIsInstance(a, str)
                    if not isinstance(b, str):
                        self.assertTrue(_has_big_int(b[0]), b)
                    fell += 1
                else:
                    _same(self, a, b, "Sample")
                    same += 1
        self.assertGreater(same, 50)
        self.assertGreater(fell, 50)

    def test_no_leak(self):
        # every path (a value, a fallback, a refusal) gives back what it took
        import tracemalloc
        v = wire.codec("Sample").encode(sample_datum(40, seed=3))
        bad = [v[:len(v) // 2], v[:10] + b"\x81" + v[11:], v + b"\0"]
        fn = compile_decoder(*[wire.codec("Sample").current.json] * 2, wire.codec("Sample").current.packed, True,
                             native=True)

        def run(k):
            for _ in range(k):
                wire.decode_sample(v)
                fn(v, memoryview(v), 10)
                for b in bad:
                    try:
                        fn(b, memoryview(b), 10)
                    except FALLBACK:
                        pass
        run(200)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            run(5000)
            grew = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        self.assertLess(grew, 64 << 10, "%d bytes kept over 5,000 rounds" % grew)

    def test_decode_sample_uses_it(self):
        v = wire.codec("Sample").encode(sample_datum(50, seed=2))
        fast = wire._SAMPLE_WHOLE.get(v[2:10])
        if fast is None:
            wire.decode_sample(v)
            fast = wire._SAMPLE_WHOLE[v[2:10]]
        self.assertIs(getattr(fast, "func", None), _native.module().decode)
        s = wire.decode_sample(v)
        self.assertEqual(s["tokens"].dtype, np.int32)
        self.assertFalse(s["tokens"].flags.writeable)

    def test_not_a_bytes_object(self):
        fn = compile_decoder(*[wire.codec("Sample").current.json] * 2, native=True)
        with self.assertRaises(TypeError):
            fn(bytearray(b"\0" * 20), None, 10)


def _has_big_int(v):
    if isinstance(v, dict):
        return any(_has_big_int(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_big_int(x) for x in v)
    return isinstance(v, int) and not -(1 << 63) <= v < (1 << 63)


class Switch(unittest.TestCase):
    def run_py(self, code, **env):
        path = [os.path.join(HERE, "..")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        e = dict(os.environ, PYTHONPATH=os.pathsep.join(path), **env)
        return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)

    def test_off(self):
        r = self.run_py("from creditflow import _native, wire; import sys\n"
                        "wire.decode_sample(wire.codec('Sample').encode(__import__('tests.util').util.sample_datum(5)))\n"
                        "f = next(iter(wire._SAMPLE_WHOLE.values()))\n"
                        "print(_native.module(), type(f).__name__)", CREDITFLOW_NATIVE="0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["None", "function"])

    def test_required_and_missing(self):
        # a source folder without the C file and no installed module: CREDITFLOW_NATIVE=1 says so
        r = self.run_py("from creditflow import _native\n_native._SOURCE = '/nonexistent/_cdecode.c'\n"
                        "import sys; sys.modules.pop('creditflow._cdecode', None)\n"
                        "_native._NAME = 'creditflow._no_such_module'\n_native.module()", CREDITFLOW_NATIVE="1")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("CREDITFLOW_NATIVE=1", r.stderr)
        self.assertIn("/nonexistent/_cdecode.c", r.stderr)


if __name__ == "__main__":
    unittest.main()
