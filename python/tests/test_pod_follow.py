"""The scorer pod's built-in PolicyAnnouncement decoder agrees with the package's."""

import os
import sys
import unittest

import creditflow
from creditflow import wire

POD = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "gpu", "pod"))


@unittest.skipUnless(os.path.isdir(POD), "gpu/pod is not in this checkout")
class PodDecoder(unittest.TestCase):
    def setUp(self):
        sys.path.insert(0, POD)
        from cfpod import follow
        self.follow = follow

    def tearDown(self):
        sys.path.remove(POD)

    def test_fingerprint_and_values(self):
        self.assertEqual(self.follow.POLICY_FINGERPRINT, wire.codec("PolicyAnnouncement").current.fingerprint)
        for v, ck in ((0, ""), (7, "/ckpt/7"), (1 << 40, "s3://bucket/ü")):
            b = creditflow.encode_policy(v, ck, 1764500000000)
            self.assertEqual(self.follow.decode_announcement(b), creditflow.decode_policy(b))

    def test_refuses_other_records(self):
        b = creditflow.encode_policy(3, "x", 1)
        for bad in (b[:-1], b + b"\x00", b[:2] + bytes(8) + b[10:], wire.codec("Sample").header + b[10:]):
            with self.assertRaises(self.follow.BadAnnouncement):
                self.follow.decode_announcement(bad)


if __name__ == "__main__":
    unittest.main()
