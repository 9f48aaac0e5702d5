"""Where AttnSR's step shares land (creditflow.learn.allocation, docs/learn.md "Where AttnSR's
attention puts the budget"): known values on a played household-long episode, the even spread
reading exactly 1, the labels paid once, and the samples it cannot read."""

import unittest

from creditflow import envs as E
from creditflow.learn import allocation as A
from creditflow.learn import oracle as O


def played():
    """go to office (enabling), open drawer (nothing: wrong room), open desk (key), go to bedroom,
    open drawer (harmful), go to office (a second walk: not paid once), open desk (a second key),
    three more moves, then the unlock: 11 turns, 10 moves."""
    env = E.make_env("household-long")
    ep = env.reset(3)
    for q in ["go to office", "open drawer", "open desk", "go to bedroom", "open drawer", "go to office",
              "open desk", "open shelf", "go to hall", "open closet"]:
        env.step(ep, env.format_query(q))
    env.step(ep, env.format_answer(ep, ep.gold))
    return ep


def sample(ep, p, budget):
    """The sample's turns with shares p and step rewards budget · p; its loss_mask laid out as the
    processor does (a 3-token prompt, then each turn's action and observation, one token a byte)."""
    turns = [{"kind": k, "p": x, "step_reward": None if x is None else budget * x} for (k, _, _), x in
             zip(ep.turns, list(p) + [None])]
    mask = [0, 0, 0]
    for _, a, obs in ep.turns:
        mask += [1] * len(a) + [0] * len(obs)
    return {"trajectory_id": "t", "turns": turns, "loss_mask": mask}


class Reading(unittest.TestCase):
    def setUp(self):
        self.ep = played()
        self.labels = O.labels_of(self.ep)

    def test_labels_of_the_episode(self):
        self.assertEqual((self.ep.enabling_turns, self.ep.key_turns, self.ep.harmful_turns), ([0, 5], [2, 6], [4]))
        self.assertEqual(len(self.ep.turns), 11)

    def test_known_values(self):
        p = [0.3, 0.05, 0.4, 0.05, 0.1, 0.02, 0.02, 0.02, 0.02, 0.02]
        r = A.where_credit_lands(sample(self.ep, p, 0.2), self.labels)
        # paid once: the first key turn (2) and the walk before it (0); the harmful turn 4
        self.assertAlmostEqual(r["helpful_p"], 0.7)
        self.assertAlmostEqual(r["helpful_even"], 2 / 10)
        self.assertEqual(r["helpful_top"], 1)
        self.assertAlmostEqual(r["helpful_reward"], 0.14)
        self.assertAlmostEqual(r["helpful_reward_even"], 0.2 * 2 / 10)
        self.assertAlmostEqual(r["harmful_p"], 0.1)
        self.assertAlmostEqual(r["harmful_even"], 1 / 10)
        self.assertEqual(r["harmful_top"], 0)
        self.assertAlmostEqual(r["harmful_reward"], 0.02)
        self.assertEqual((r["samples"], r["helpful_samples"], r["harmful_samples"]), (1, 1, 1))
        # by length: each move's action and observation, over the ten moves'
        n = [len(a) + len(o) for _, a, o in self.ep.turns[:10]]
        self.assertAlmostEqual(r["helpful_len"], (n[0] + n[2]) / sum(n))
        self.assertAlmostEqual(r["harmful_len"], n[4] / sum(n))
        self.assertGreater(r["helpful_len"], r["helpful_even"])  # "go to office" and the note are long

    def test_negative_budget_keeps_its_sign(self):
        p = [0.3, 0.05, 0.4, 0.05, 0.1, 0.02, 0.02, 0.02, 0.02, 0.02]
        r = A.where_credit_lands(sample(self.ep, p, -0.1), self.labels)
        self.assertAlmostEqual(r["helpful_reward"], -0.07)
        self.assertAlmostEqual(r["helpful_reward_even"], -0.1 * 2 / 10)

    def test_even_spread_reads_one(self):
        r = A.where_credit_lands(sample(self.ep, [1 / 10] * 10, 0.25), self.labels)
        self.assertAlmostEqual(r["helpful_p"] / r["helpful_even"], 1.0)
        self.assertAlmostEqual(r["harmful_p"] / r["harmful_even"], 1.0)
        self.assertAlmostEqual(r["helpful_reward"], r["helpful_reward_even"])
        self.assertAlmostEqual(r["helpful_top"], 2 / 10)  # a ten-way tie: chance

    def test_unreadable_samples(self):
        # not AttnSR (no shares), and K − 1 = 1 (the share is 1 whatever the attention says)
        self.assertIsNone(A.where_credit_lands({"turns": [{"p": None}] * 11}, self.labels))
        self.assertIsNone(A.where_credit_lands({"turns": [{"p": 1.0, "step_reward": 0.1}, {"p": None}]},
                                               {"turns": 2}))
        with self.assertRaises(O.MissingLabels):
            A.where_credit_lands(sample(self.ep, [1 / 10] * 10, 0.25), dict(self.labels, turns=12))
        cut = sample(self.ep, [1 / 10] * 10, 0.25)
        last = O.turn_spans(cut["loss_mask"])[-1][0]
        cut["loss_mask"] = cut["loss_mask"][:last] + [0] * (len(cut["loss_mask"]) - last)  # the last action's run gone
        with self.assertRaises(O.MissingLabels):
            A.where_credit_lands(cut, self.labels)

    def test_batch_sums(self):
        class Reader:
            def __init__(self, labels):
                self.labels = labels

            def get(self, _):
                return self.labels

        p = [0.3, 0.05, 0.4, 0.05, 0.1, 0.02, 0.02, 0.02, 0.02, 0.02]
        b = A.batch_allocation([sample(self.ep, p, 0.2), sample(self.ep, [1 / 10] * 10, -0.1),
                                {"trajectory_id": "x", "turns": [{"p": None}] * 11}], Reader(self.labels))
        self.assertEqual((b["alloc_samples"], b["alloc_helpful_samples"]), (2, 2))
        self.assertAlmostEqual(b["alloc_helpful_top"], 1 + 2 / 10, places=5)
        self.assertAlmostEqual(b["alloc_helpful_p"], 0.7 + 2 / 10, places=5)
        self.assertAlmostEqual(b["alloc_helpful_even"], 4 / 10, places=5)


if __name__ == "__main__":
    unittest.main()
