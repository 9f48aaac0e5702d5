"""cfpod.longrows: the long trajectory's backward rows and the work they take."""

import io
import json
import random
import unittest
from contextlib import redirect_stdout

from cfpod import longrows
from tests.util import cpu_only, model_from, small_config


@cpu_only
class LongRowsTest(unittest.TestCase):
    def test_rows_and_work(self):
        rows = longrows.trajectory(random.Random(1), 2048 - 25, 30, 96, 96)
        self.assertEqual(len(rows), 31)
        full = rows[0][0]
        self.assertTrue(2048 - 30 < len(full) + 25 <= 2048, len(full))  # turns round down
        for k, (ctx, tmpl, _) in enumerate(rows[1:]):
            self.assertEqual(ctx.count(96) - full.count(96), 1, k)
            self.assertEqual(len(tmpl), 25)
        # The counted work is what the model forwards with prefix sharing (both packings).
        m, _ = model_from(small_config(max_position_embeddings=4096), seed=3)
        small = longrows.trajectory(random.Random(2), 400, 6, 96, 96)
        tokens, pairs = longrows.work(small)
        for packing in ("walk", "tree"):
            _, usage = m.score_rows(small, packing=packing)
            self.assertEqual(usage.tokens_forwarded, tokens, packing)
        self.assertGreater(pairs, tokens)

    def test_command(self):
        out = io.StringIO()
        with redirect_stdout(out):
            res = longrows.main(["--tokens", "600", "--turns", "5", "--layers", "1", "--size", "small",
                                 "--threads", "2", "--json"])
        last = json.loads(out.getvalue().strip().splitlines()[-1])
        self.assertEqual(last, res)
        self.assertEqual((res["rows"], res["attention"], res["packing"]), (6, "sdpa", "walk"))
        self.assertTrue(res["finite"])
        self.assertGreater(res["seconds"], 0)
        self.assertLess(res["tokens_forwarded"], res["tokens_row_by_row"])


if __name__ == "__main__":
    unittest.main()
