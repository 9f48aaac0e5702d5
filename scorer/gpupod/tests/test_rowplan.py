"""The plan of a score request (rowplan.py): no recursion, bounded packs, every prefix
forwarded once, and the scores of both packings against row-by-row scoring."""

import random
import sys
import unittest

from cfpod import rowplan
from cfpod.scoring import prepare
from tests.test_model import search_rows
from tests.util import TOL, model_from, small_config


def chained_rows(r, n, vocab=96, gold=6):
    """A gold answer scored after every prefix of one trajectory: row k = (tokens[:k+1], gold)."""
    toks = [r.randrange(vocab - 8) for _ in range(n)]
    g = [vocab - 8 + r.randrange(8) for _ in range(gold)]  # never a trajectory token: a 1500-deep chain
    return [(toks[:k + 1], g, (0, gold)) for k in range(n)]


def long_trajectory(r, turns=30, tokens=32768, vocab=96, placeholder=96):
    """Backward rows of a trajectory of `turns` turns filling `tokens` tokens: one row with
    every turn, one per turn with that turn replaced by the placeholder."""
    prompt = [r.randrange(vocab) for _ in range(300)]
    per = (tokens - len(prompt) - 30) // turns
    ts = [[r.randrange(vocab) for _ in range(per)] for _ in range(turns)]
    gold = [r.randrange(vocab) for _ in range(25)]
    rows = [(prompt + sum(ts, []), gold, (14, 20))]
    for k in range(turns):
        ctx = list(prompt)
        for i, t in enumerate(ts):
            ctx += [placeholder] if i == k else t
        rows.append((ctx, gold, (14, 20)))
    return rows


def distinct_prefixes(rows):
    seqs = [tuple(c) + tuple(t) for c, t, _ in rows]
    n, seen = 0, set()
    for s in seqs:  # count distinct prefixes without materializing them all
        for i in range(1, len(s) + 1):
            h = hash(s[:i])
            if h not in seen:
                seen.add(h)
                n += 1
    return n


class PlanTest(unittest.TestCase):
    def test_a_chain_deeper_than_the_recursion_limit(self):
        r = random.Random(1)
        rows = chained_rows(r, 1500)
        self.assertGreater(1500, sys.getrecursionlimit() // 2)
        m, _ = model_from(small_config(), seed=2)
        prep, _ = prepare(m.cfg, rows)
        root = rowplan.build_tree(prep)
        depth, n = 0, root
        while n.children:
            n = max(n.children, key=lambda c: len(c.children))
            depth += 1
        self.assertGreaterEqual(depth, 1499)
        for packing in ("walk", "tree"):
            _, u, plan = m.plan_rows(rows, packing=packing)
            self.assertEqual(u.tokens_forwarded, 1500 + 1500 * 6)
            if packing == "tree":
                self.assertLessEqual(u.max_pack_tokens, 4096)
                self.assertGreater(u.packs, 1)
            else:
                self.assertEqual((u.packs, u.max_pack_tokens), (0, 0))
                self.assertEqual(len(plan.calls), 2999)
        # Scored (packs of 1,024 tokens keep this quick on a CPU; the walk runs the same
        # edges as the tree's chunks): rows of every depth against row-by-row scoring.
        got, u = m.score_rows(rows, packing="tree", pack_tokens=1024)
        for k in (0, 1, 2, 700, 1000, 1498, 1499):
            self.assertAlmostEqual(got[k], m.score_rows_naive([rows[k]])[0][0], delta=TOL, msg=f"row {k}")

    def test_packs_are_bounded_and_forward_every_prefix_once(self):
        r = random.Random(3)
        rows = long_trajectory(r, turns=5, tokens=700) + search_rows(r, 96, 96) + search_rows(r, 96, 96, turns=1)
        rows.append(([5, 6, 7], [8, 9], (0, 2)))
        m, ts = model_from(small_config("Qwen2ForCausalLM", max_position_embeddings=8192), seed=4)
        naive, _ = m.score_rows_naive(rows)
        distinct = distinct_prefixes(rows)
        for budget in (5, 64, 400, 4096):
            with self.subTest(budget=budget):
                prep, u, plan = m.plan_rows(rows, packing="tree", pack_tokens=budget)
                self.assertEqual(u.tokens_forwarded, distinct)
                self.assertLessEqual(u.max_pack_tokens, budget)
                sizes = [c[2] - c[1] if c[0] == "edge" else c[2] for c in plan.calls]
                self.assertEqual(max(sizes), u.max_pack_tokens)
                self.assertEqual(len(plan.calls), u.packs)
                got, _ = m.score_plan((prep, u, plan))
                for k, (a, b) in enumerate(zip(got, naive)):
                    self.assertAlmostEqual(a, b, delta=TOL, msg=f"row {k}")
        _, uw = m.score_rows(rows, packing="walk")
        self.assertEqual((uw.tokens_forwarded, uw.packs, uw.max_pack_tokens), (distinct, 0, 0))

    def test_long_trajectory_is_split(self):
        # 30 turns in 32k tokens: the backward rows' tree holds ~458k distinct tokens; no
        # call may hold more than the pack budget (planned only: no model work).
        r = random.Random(5)
        rows = long_trajectory(r)
        m, _ = model_from(small_config(max_position_embeddings=40000), seed=6)
        prep, u, plan = m.plan_rows(rows, packing="tree")
        self.assertGreater(u.tokens_forwarded, 400_000)
        self.assertLessEqual(u.max_pack_tokens, 4096)
        self.assertEqual(u.max_pack_tokens, 4096)
        self.assertLess(u.tokens_forwarded, u.tokens_row_by_row)


class PaddedBaselineTest(unittest.TestCase):
    def test_padded_batches_score_as_row_by_row(self):
        r = random.Random(7)
        rows = search_rows(r, 96, 96) + search_rows(r, 96, 96, turns=2) + [([5, 6, 7], [8, 9], (0, 2), 0.5)]
        m, _ = model_from(small_config("Qwen3ForCausalLM"), seed=8)
        naive, _ = m.score_rows_naive(rows)
        for budget in (1, 200, 1 << 16):
            with self.subTest(budget=budget):
                got, padded = m.score_rows_padded(rows, batch_tokens=budget)
                for a, b in zip(got, naive):
                    self.assertAlmostEqual(a, b, delta=TOL)
                self.assertGreaterEqual(padded, sum(len(c) + len(t) for c, t, *_ in rows))


if __name__ == "__main__":
    unittest.main()
