import hashlib
import unittest

from creditflow.chunks import Reassembler, split


def feed(r, msgs):
    out, broken = [], []
    for off, (k, v, hs) in enumerate(msgs):
        rec, b = r.add(0, off, k, v, hs)
        if rec is not None:
            out.append(rec)
        broken.extend(b)
    return out, broken


class Chunks(unittest.TestCase):
    def setUp(self):
        self.big = bytes((i * 31) & 0xFF for i in range(10_000))
        self.other = hashlib.sha256(b"x").digest() * 200  # 6,400 bytes

    def test_interleaved_records_and_commit_offset(self):
        a = split(b"a", self.big, [("creditflow-schema", b"s")], chunk_bytes=3000)
        b = split(b"b", self.other, chunk_bytes=3000)
        self.assertEqual(len(a), 4)
        self.assertEqual(a[0][2][-3], ("creditflow-chunk", b"0/4"))
        msgs = [a[0], b[0], (b"c", b"plain", []), a[1], b[1], a[2], b[2], a[3]]
        r = Reassembler()
        outs = []
        for off, (k, v, hs) in enumerate(msgs):
            rec, broken = r.add(0, off, k, v, hs)
            self.assertEqual(broken, [])
            if rec is not None:
                outs.append(rec)
            if off < 7:
                self.assertEqual(r.commit_offset(0, off + 1), 0)  # a's first chunk holds it
        self.assertEqual(r.commit_offset(0, 8), 8)
        self.assertEqual([o["offset"] for o in outs], [2, 6, 7])
        self.assertEqual(outs[1]["value"], self.other)
        self.assertEqual(outs[2]["value"], self.big)
        self.assertEqual(outs[2]["first"], 0)
        self.assertEqual(outs[2]["headers"], [("creditflow-schema", b"s")])

    def test_gap_stray_corrupt(self):
        a = split(b"a", self.big, chunk_bytes=3000)
        out, broken = feed(Reassembler(), [a[0], a[2]])
        self.assertEqual((out, [x["reason"] for x in broken]), ([], ["chunk_incomplete"]))
        r = Reassembler()
        out, broken = feed(r, [a[1], a[2], a[3]])
        self.assertEqual((out, broken, r.stray), ([], [], 3))
        bad = list(a)
        bad[1] = (a[1][0], bytes([a[1][1][0] ^ 1]) + a[1][1][1:], a[1][2])
        out, broken = feed(Reassembler(), bad)
        self.assertEqual([x["reason"] for x in broken], ["chunk_corrupt"])

    def test_restart_on_chunk_zero(self):
        a = split(b"a", self.big, chunk_bytes=3000)
        out, broken = feed(Reassembler(), [a[0], a[1]] + a)
        self.assertEqual(broken, [])
        self.assertEqual([o["value"] for o in out], [self.big])


if __name__ == "__main__":
    unittest.main()
