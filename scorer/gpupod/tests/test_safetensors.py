import json
import os
import shutil
import struct
import tempfile
import unittest

import torch

from cfpod import safetensors as st
from tests.util import cpu_only


@cpu_only
class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def _bytes(self, b):
        with open(self.path(), "wb") as f:
            f.write(b)

    def path(self, name="m.safetensors"):
        return os.path.join(self.dir, name)

    def test_round_trip_every_weight_dtype(self):
        vals = torch.tensor([[0.0, -1.5, 2.0 ** -20], [65504.0, 1.0 / 3, -7.25]])
        for dtype, exact in (("F32", vals), ("F16", vals.half().float()), ("BF16", vals.bfloat16().float())):
            with self.subTest(dtype=dtype):
                p = self.path(f"{dtype}.safetensors")
                st.write(p, {"w": vals, "v": torch.arange(5, dtype=torch.float32)}, dtype)
                ts = st.TensorSet(self.dir)
                got = ts.load("w", [2, 3])
                ts.close()
                self.assertTrue(torch.equal(got, exact), f"{got} != {exact}")
                os.remove(p)

    def test_bf16_decoding_is_exact_bit_widening(self):
        # 0x3F80 = 1.0, 0xC040 = -3.0, 0x0001 = smallest subnormal, 0x7F80 = +inf
        raw = struct.pack("<4H", 0x3F80, 0xC040, 0x0001, 0x7F80)
        hdr = json.dumps({"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
        with open(self.path(), "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr + raw)
        ts = st.TensorSet(self.dir)
        got = ts.load("x", [4]).tolist()
        ts.close()
        self.assertEqual(got[:2], [1.0, -3.0])
        self.assertEqual(got[2], struct.unpack("<f", struct.pack("<I", 1 << 16))[0])
        self.assertEqual(got[3], float("inf"))

    def test_shards_are_united_and_duplicates_refused(self):
        st.write(self.path("a.safetensors"), {"x": torch.ones(2)})
        st.write(self.path("b.safetensors"), {"y": torch.zeros(3)})
        ts = st.TensorSet(self.dir)
        self.assertTrue(ts.has("x") and ts.has("y"))
        self.assertEqual(ts.load("y", [3]).tolist(), [0.0, 0.0, 0.0])
        with self.assertRaisesRegex(st.SafetensorsError, "shape \\[3\\], the config needs \\[4\\]"):
            ts.load("y", [4])
        with self.assertRaisesRegex(st.SafetensorsError, "missing"):
            ts.load("z", [1])
        ts.close()
        st.write(self.path("c.safetensors"), {"x": torch.ones(2)})
        with self.assertRaisesRegex(st.SafetensorsError, "appears in both"):
            st.TensorSet(self.dir)

    def _raw(self, header, data=b"", hlen=None):
        h = json.dumps(header).encode()
        with open(self.path(), "wb") as f:
            f.write(struct.pack("<Q", len(h) if hlen is None else hlen) + h + data)

    def test_malformed_files_are_refused_with_reasons(self):
        cases = [
            ("short", lambda: self._bytes(b"\x01\x02"), "too short"),
            ("header length", lambda: self._raw({}, hlen=1 << 40), "does not fit"),
            ("not json", lambda: self._bytes(struct.pack("<Q", 3) + b"{{{"), "not a JSON"),
            ("outside", lambda: self._raw({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4),
             "outside the data"),
            ("size", lambda: self._raw({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
             "needs 12 bytes"),
            ("dtype", lambda: self._raw({"x": {"dtype": "F12", "shape": [1], "data_offsets": [0, 2]}}, b"\0" * 2),
             "unknown dtype"),
            ("overlap", lambda: self._raw({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                           "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
             "overlap"),
        ]
        for name, make, msg in cases:
            with self.subTest(name):
                make()
                with self.assertRaisesRegex(st.SafetensorsError, msg):
                    st.TensorSet(self.dir)
        os.remove(self.path())
        with self.assertRaisesRegex(st.SafetensorsError, "no \\*.safetensors"):
            st.TensorSet(self.dir)

    def test_integer_tensors_open_but_do_not_load_as_weights(self):
        self._raw({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8)
        ts = st.TensorSet(self.dir)
        with self.assertRaisesRegex(st.SafetensorsError, "cannot be loaded as weights"):
            ts.load("ids", [1])
        ts.close()


if __name__ == "__main__":
    unittest.main()
