import unittest

import numpy as np

from creditflow.integrations.rows import MissingSamples, align_advantages, split_turns


class SplitTurns(unittest.TestCase):
    def test_runs_of_the_mask_are_turns(self):
        ids = [1, 2, 3, 10, 11, 20, 21, 22, 12, 13]
        mask = [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]
        prompt, turns = split_turns(ids, mask)
        self.assertEqual(prompt, [1, 2, 3])
        self.assertEqual(turns, [("search", [10, 11], [20, 21, 22]), ("answer", [12, 13], None)])

    def test_trailing_observation_keeps_the_tool_kind(self):
        prompt, turns = split_turns([5, 6, 7, 8], [0, 1, 0, 0], tool_kind="tool", final_kind="answer")
        self.assertEqual((prompt, turns), ([5], [("tool", [6], [7, 8])]))

    def test_rows_that_are_not_trajectories(self):
        for ids, mask in (([1, 2], [1, 0]), ([1, 2], [0, 0]), ([1, 2], [0]), ([1, 2], [0, 2])):
            with self.assertRaises(ValueError):
                split_turns(ids, mask)


class AlignAdvantages(unittest.TestCase):
    ids = np.array([1, 2, 10, 20, 11], dtype=np.int64)
    mask = np.array([0, 0, 1, 0, 1])

    def sample(self, **kw):
        s = {"trajectory_id": "t", "tokens": self.ids.astype(np.int32), "loss_mask": self.mask.astype(np.uint8),
             "advantages": np.array([0, 0, 0.5, 0, -1.25], dtype=np.float32), "output": "advantages"}
        s.update(kw)
        return s

    def test_values_on_policy_tokens_zero_elsewhere(self):
        adv = align_advantages(self.ids, self.mask, self.sample(advantages=np.array([9, 9, 0.5, 9, -1.25], np.float32)))
        np.testing.assert_array_equal(adv, np.array([0, 0, 0.5, 0, -1.25], np.float32))
        self.assertEqual(adv.dtype, np.float32)

    def test_mismatches_are_errors(self):
        with self.assertRaisesRegex(ValueError, "tokens"):
            align_advantages(self.ids, self.mask, self.sample(tokens=np.array([1, 2, 10, 20], np.int32)))
        with self.assertRaisesRegex(ValueError, "at token 3"):
            align_advantages(self.ids, self.mask, self.sample(loss_mask=np.array([0, 0, 1, 1, 1], np.uint8)))
        with self.assertRaisesRegex(ValueError, "no advantages"):
            align_advantages(self.ids, self.mask, self.sample(advantages=None, output="token_rewards"))


class Missing(unittest.TestCase):
    def test_message_names_every_missing_trajectory(self):
        e = MissingSamples({"b", "a"}, 2.0, "creditflow.samples")
        self.assertEqual(e.missing, ["a", "b"])
        self.assertIn("a, b", str(e))
        self.assertIsInstance(e, TimeoutError)


if __name__ == "__main__":
    unittest.main()
