"""cfpod.bench's per-request counts: what the device sees (model calls, uploads, reads,
tokens) counted while the model runs equals what the plans say without running it, and the
design's promises hold: 3 host syncs per request whatever its size, tree packing in fewer
calls than the walk, the same tokens for both."""

import contextlib
import io
import unittest

from cfpod import bench
from tests.util import ON_CPU


@unittest.skipUnless(ON_CPU, "CPU-only: the counts do not depend on the device")
class BenchCountsTest(unittest.TestCase):
    def test_counted_equals_planned(self):
        with contextlib.redirect_stdout(io.StringIO()):
            res = bench.main(["--device", "cpu", "--size", "small", "--trajectories", "3", "--naive-trajectories", "1",
                              "--padded-trajectories", "3", "--attention-lengths", "300", "--budget", "4000"])
        planned, counted = res["planned_counts"], res["counts"]
        for k in ("tree", "walk", "padded"):
            with self.subTest(packing=k):
                self.assertEqual(counted[k], planned[k])
        for k in ("tree", "walk"):
            self.assertEqual(counted[k]["host_syncs_per_request"], 3)
        self.assertLess(counted["tree"]["calls_per_request"], counted["walk"]["calls_per_request"])
        self.assertEqual(counted["tree"]["tokens_per_request"], counted["walk"]["tokens_per_request"])
        self.assertGreater(counted["padded"]["tokens_per_request"], counted["tree"]["tokens_per_request"])
        self.assertLessEqual(res["lapo_tree"]["max_pack_tokens"], 4096)


if __name__ == "__main__":
    unittest.main()
