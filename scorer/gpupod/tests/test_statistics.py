"""The entropy and kl statistics (feature "statistics", docs/scorer-protocol.md): the wire
fields in both body forms, their 400s, and the model's statistics against log-probabilities
computed through the prefix-shared scorer, an independent path."""

import math
import unittest

from cfpod.binary import decode_rows
from cfpod.protocol import FEATURES, Reject, parse_score_request
from tests.binwire import encode_rows, json_rows
from tests.util import TOL, cpu_only, model_from, small_config

INFO = {"vocab_size": 260, "max_context": 4096, "layers": 2}
TARGET = [7, 8, 9]
SETS = [
    {"id": "lp", "rows": [{"context": [1, 2, 3], "target": TARGET, "span": (0, 3)}]},
    {"id": "h", "statistic": "entropy", "tokens": [1, 2, 3, 4], "target": TARGET, "span": (1, 3), "rows": [
        {"pieces": [(0, 4)], "temperature": 0.7}, {"pieces": [(0, 1), [259], (3, 4)]}]},
    {"id": "kl", "statistic": "kl", "tokens": [1, 2, 3, 4], "target": TARGET, "span": (0, 2), "rows": [
        {"pieces": [(0, 4)], "reference": [1, 259, 4]},
        {"context": [5, 6], "target": [9, 9], "span": (0, 1), "reference": [6], "temperature": 1.5}]},
]


@cpu_only
class StatisticsWire(unittest.TestCase):
    def test_advertised(self):
        self.assertIn("statistics", FEATURES)

    def test_binary_and_json_give_the_same_input(self):
        want = parse_score_request(json_rows(SETS), INFO, statistics=True)
        got = parse_score_request(decode_rows(encode_rows(SETS)), INFO, statistics=True)
        self.assertEqual(got, want)
        self.assertEqual([st for _, _, st in got], ["logprob", "entropy", "kl"])
        self.assertEqual(got[2][1][0], ([1, 2, 3, 4], TARGET, (0, 2), 1.0, [1, 259, 4]))
        self.assertEqual(len(got[1][1][0]), 4)  # no reference on other statistics' rows
        # Without statistics=True, the shape of before the feature.
        self.assertEqual(len(parse_score_request(json_rows(SETS[:1]), INFO)[0]), 2)

    def test_rejections(self):
        kl_row = {"context": [1, 2], "target": TARGET, "span": (0, 1), "reference": [1]}
        for s, msg in [({"statistic": "variance", "rows": [SETS[0]["rows"][0]]}, "variance"),
                       ({"statistic": "kl", "rows": [SETS[0]["rows"][0]]}, "reference"),
                       ({"statistic": "kl", "rows": [dict(kl_row, reference=[])]}, "reference"),
                       ({"statistic": "entropy", "rows": [kl_row]}, "only taken by the kl"),
                       ({"rows": [kl_row]}, "only taken by the kl"),
                       ({"statistic": "kl", "rows": [dict(kl_row, reference=[999])]}, "reference token 999")]:
            with self.subTest(msg=msg):
                for body in (json_rows([s]), decode_rows(encode_rows([s]))):
                    with self.assertRaises(Reject) as cm:
                        parse_score_request(body, INFO, statistics=True)
                    self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
                    self.assertIn(msg, cm.exception.message)


class StatisticsModel(unittest.TestCase):
    """score_rows_statistic against distributions read through score_rows: log p(v | c, t[:k])
    is the score of the row (c, t[:k] + [v], span (k, k + 1)), for every v of the vocabulary."""

    @classmethod
    def setUpClass(cls):
        cls.m, _ = model_from(small_config(), seed=5)
        cls.V = cls.m.cfg.vocab

    def dists(self, ctx, tgt, a, b, temp):
        out = []
        for k in range(a, b):
            rows = [(ctx, tgt[:k] + [v], (k, k + 1), temp) for v in range(self.V)]
            out.append(self.m.score_rows(rows)[0])
        return out

    def test_entropy_and_kl(self):
        ctx, ref, tgt = [3, 14, 15, 92, 65], [3, 14, 96, 65], [35, 89, 79, 32]
        for temp in (1.0, 0.7):
            rows = [(ctx, tgt, (1, 3), temp, ref)]
            lp = self.dists(ctx, tgt, 1, 3, temp)
            lq = self.dists(ref, tgt, 1, 3, temp)
            h = sum(-sum(math.exp(x) * x for x in d) for d in lp) / 2
            kl = sum(sum(math.exp(x) * (x - y) for x, y in zip(d, e)) for d, e in zip(lp, lq)) / 2
            got_h, u = self.m.score_rows_statistic([r[:4] for r in rows], "entropy")
            got_kl, uk = self.m.score_rows_statistic(rows, "kl")
            self.assertAlmostEqual(got_h[0], h, delta=TOL * max(1, h))
            self.assertAlmostEqual(got_kl[0], kl, delta=TOL * max(1, kl))
            self.assertTrue(0 < got_h[0] < math.log(self.V))
            self.assertGreater(got_kl[0], 0)
            self.assertEqual((u.tokens_forwarded, uk.tokens_forwarded), (9, 17))
        same, _ = self.m.score_rows_statistic([(ctx, tgt, (0, 4), 1.0, ctx)], "kl")
        self.assertEqual(same, [0.0])
        lp, _ = self.m.score_rows_statistic([(ctx, tgt, (0, 4))], "logprob")
        self.assertEqual(lp, self.m.score_rows([(ctx, tgt, (0, 4))])[0])


if __name__ == "__main__":
    unittest.main()
