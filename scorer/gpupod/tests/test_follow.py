"""The policy follower's decisions, without a broker: which announcements load what."""

import io
import os
import shutil
import tempfile
import unittest

from cfpod.model import Model
from cfpod.server import Logger, Pod
from tests.util import DEVICE, TOL, cpu_only, small_config, write_checkpoint

try:
    import confluent_kafka  # noqa: F401
    from cfpod.follow import PolicyFollower
    from creditflow.wire import codec, decode_policy  # the package the follower uses
except ImportError:
    confluent_kafka = None


def announcement(version, checkpoint="", at=1764500000000):
    # The codec itself: encode_policy refuses the negative versions the decoder must still read.
    return codec("PolicyAnnouncement").encode({"version": version, "checkpoint": checkpoint, "announced_at_ms": at})


@unittest.skipIf(confluent_kafka is None, "confluent-kafka not installed")
@cpu_only
class Decode(unittest.TestCase):
    def test_roundtrip_and_refusals(self):
        self.assertEqual(decode_policy(announcement(9, "/m/9", 5)),
                         {"version": 9, "checkpoint": "/m/9", "announced_at_ms": 5})
        self.assertEqual(decode_policy(announcement(-1))["version"], -1)


@unittest.skipIf(confluent_kafka is None, "confluent-kafka not installed")
class Follow(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.m1, cls.m2 = os.path.join(cls.dir, "m1"), os.path.join(cls.dir, "m2")
        write_checkpoint(cls.m1, small_config(), seed=1, placeholder=96)
        write_checkpoint(cls.m2, small_config(), seed=2, placeholder=96)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def setUp(self):
        self.log = io.StringIO()
        self.pod = Pod(self.m1, device=DEVICE, policy_version=3, log=Logger("info", self.log))
        # The consumer is never polled here: handle() is fed directly.
        self.f = PolicyFollower(self.pod, "127.0.0.1:1")

    def tearDown(self):
        self.f._consumer.close()

    def score(self):
        return self.pod.current.model.score_rows([([1, 2, 3], [4, 5], (0, 2))])[0][0]

    def test_newer_announcement_loads_its_checkpoint(self):
        before = self.score()
        self.f.handle(announcement(5, self.m2))
        self.assertEqual(self.pod.current.policy_version, 5)
        self.assertEqual(self.pod.info()["policy_version"], 5)
        want = Model.load(self.m2, device=DEVICE).score_rows([([1, 2, 3], [4, 5], (0, 2))])[0][0]
        self.assertAlmostEqual(self.score(), want, delta=TOL)  # exact on CPU; kernels may differ on accelerators
        self.assertGreater(abs(before - want), 100 * TOL)

    def test_older_or_equal_or_empty_changes_nothing(self):
        for v, ck in ((2, self.m2), (3, self.m2), (9, "")):
            self.f.handle(announcement(v, ck))
            self.assertEqual((self.pod.current.policy_version, self.pod.current.folder), (3, os.path.abspath(self.m1)))
        # 9 was announced (without weights): a later 7 is older and ignored even with weights.
        self.f.handle(announcement(7, self.m2))
        self.assertEqual(self.pod.current.policy_version, 3)
        self.assertEqual(self.f.newest, 9)

    def test_bad_checkpoint_keeps_serving_and_bad_values_are_counted(self):
        self.f.handle(announcement(6, os.path.join(self.dir, "missing")))
        self.assertEqual(self.pod.current.policy_version, 3)
        self.assertIn("announced checkpoint failed to load", self.log.getvalue())
        self.f.handle(b"\xc3\x01" + b"\x00" * 8 + b"\x02")
        self.assertEqual(self.f.bad, 1)
        self.f.handle(None)  # a tombstone
        self.assertEqual((self.f.bad, self.pod.current.policy_version), (1, 3))


if __name__ == "__main__":
    unittest.main()
