"""cfpod.bench --vs-transformers at tiny sizes, so that it keeps working: the JSON carries every
method's numbers and ratios, the tokens forwarded are the exact counts (pod: every distinct
prefix of the rows once; padded: rows x the longest row; prefix cache: the common prefix plus
every row's suffix), the three methods give the same scores and the pod's blockwise AttnSR
graphs equal those folded from transformers' eager attentions. Timings are not asserted."""

import contextlib
import io
import os
import random
import unittest

from tests.util import ON_CPU

try:
    import transformers  # noqa: F401
    HAVE_TRANSFORMERS = True
except ImportError:
    HAVE_TRANSFORMERS = False
    if os.environ.get("CI") == "true":
        raise


def distinct_prefixes(rows):
    seen = set()
    for c, g, _ in rows:
        s = tuple(c) + tuple(g)
        seen.update(s[:i] for i in range(1, len(s) + 1))
    return len(seen)


@unittest.skipUnless(ON_CPU, "CPU-only: transformers runs on the CPU here")
@unittest.skipUnless(HAVE_TRANSFORMERS, "needs transformers (the project's Python environment has it)")
class BenchVsTransformersTest(unittest.TestCase):
    def test_tiny_run(self):
        from cfpod import bench, bench_hf
        with contextlib.redirect_stdout(io.StringIO()):
            res = bench.main(["--vs-transformers", "--size", "tiny", "--layers", "2", "--search-qa-trajectories", "3",
                              "--8k-trajectories", "2", "--long-tokens", "700", "--scale", "0.2",
                              "--capture-lengths", "600", "--threads", "1", "--seed", "3"])
        for k in ("torch", "transformers", "threads", "layers", "capture_layers", "goal"):
            self.assertIn(k, res)
        r = random.Random(3)
        V = bench_hf.TINY["vocab_size"]
        shapes = {"search_qa": [bench_hf.trajectory(r, V - 1, V - 1, scale=0.2) for _ in range(3)],
                  "8k": [bench_hf.trajectory(r, V - 1, V - 1, total=700, scale=0.2) for _ in range(2)]}
        self.assertEqual([len(t[0][0]) for t in shapes["8k"]], [700, 700])  # prompt and turns
        for name, trajs in shapes.items():
            got = res["lapo_" + name]
            with self.subTest(shape=name):
                self.assertEqual(got["rows"], sum(len(t) for t in trajs))
                self.assertGreater(got["tokens_ratio_padded"], 1)
                self.assertEqual(got["pod"]["tokens_forwarded"], sum(distinct_prefixes(t) for t in trajs))
                self.assertEqual(got["padded"]["tokens_forwarded"],
                                 sum(len(t) * max(len(c) + len(g) for c, g, _ in t) for t in trajs))
                want = 0
                for t in trajs:
                    seqs = [list(c) + list(g) for c, g, _ in t]
                    p = 0
                    while p < min(len(c) for c, _, _ in t) - 1 and len({s[p] for s in seqs}) == 1:
                        p += 1
                    want += p + sum(len(s) - p for s in seqs)
                self.assertEqual(got["prefix_cache"]["tokens_forwarded"], want)
                self.assertEqual(got["pod_sdpa"]["tokens_forwarded"], got["pod"]["tokens_forwarded"])
                for m in ("pod", "pod_sdpa", "padded", "prefix_cache"):
                    self.assertGreater(got[m]["seconds"], 0)
                    self.assertGreater(got[m]["rows_per_second"], 0)
                for m in ("pod_sdpa", "padded", "prefix_cache"):
                    self.assertLess(got[m]["max_abs_score_diff_vs_pod"], 1e-4)
                for m in ("padded", "prefix_cache"):
                    self.assertGreaterEqual(got["tokens_ratio_" + m], 1)  # 1 where a trajectory has one turn
                    self.assertEqual(set(got["speedup_vs_" + m]), {"pod", "pod_sdpa"})
        (cap,) = res["attnsr_capture"]
        self.assertEqual((cap["tokens"], cap["steps"]), (600, 2))
        for m in ("pod", "eager"):
            self.assertGreater(cap[m]["peak_rss_mib"], 0)
            self.assertGreater(cap[m]["seconds"], 0)
        for k in ("speedup", "peak_rss_ratio", "extra_rss_mib"):
            self.assertIn(k, cap)
        self.assertLess(cap["max_abs_graph_diff"], 1e-6)


if __name__ == "__main__":
    unittest.main()
