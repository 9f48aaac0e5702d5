import math
import unittest

import numpy as np

import creditflow
from creditflow import InvalidTrajectory, Limits, build_trajectory


def base(**kw):
    args = dict(trajectory_id="t-1", prompt_id="p-1", group_size=5, sample_index=0, prompt_ids=[1, 2, 3],
                turns=[("search", [4, 5], [6, 7]), ("answer", [8, 9])], policy_version=3,
                pred_answer="Paris", gold_answers=["Paris"], tokenize=creditflow.byte_tokenizer,
                rollout_logprobs=[-0.1, -0.2, -0.3, -0.4], temperature=1.0, created_at_ms=1)
    args.update(kw)
    return args


def word_tokenizer(text):
    """Whitespace-and-tag pieces with character offsets, ids from a fixed hash: a tokenizer
    whose tokens span several characters, like a real BPE."""
    ids, offs, i = [], [], 0
    while i < len(text):
        j = i + 1
        while j < len(text) and text[j].isalnum() == text[i].isalnum() and not text[j].isspace() and text[i].isalnum():
            j += 1
        ids.append(sum(map(ord, text[i:j])) % 1000)
        offs.append((i, j))
        i = j
    return ids, offs


class GoldTarget(unittest.TestCase):
    def test_byte_tokenizer_span_is_the_answer_bytes(self):
        t = build_trajectory(**base(gold_answers=["Zürich"]))
        a, b = t["gold_span"]
        self.assertEqual(bytes(t["gold_target"][a:b]).decode(), "Zürich")
        self.assertEqual(bytes(t["gold_target"]).decode(), creditflow.DEFAULT_TEMPLATE.replace("{gold}", "Zürich"))

    def test_multi_character_tokens(self):
        t = build_trajectory(**base(gold_answers=["New York"], tokenize=word_tokenizer))
        ids, offs = word_tokenizer(creditflow.DEFAULT_TEMPLATE.replace("{gold}", "New York"))
        a, b = t["gold_span"]
        text = creditflow.DEFAULT_TEMPLATE.replace("{gold}", "New York")
        self.assertEqual(text[offs[a][0]:offs[b - 1][1]], "New York")

    def test_token_straddling_the_answer_counts(self):
        # one token per 3 characters: tokens overlap the answer's edges
        def chunks(text):
            offs = [(i, min(i + 3, len(text))) for i in range(0, len(text), 3)]
            return [k for k in range(len(offs))], offs
        ids, (a, b) = creditflow.gold_target("abcd", chunks, "xy{gold}z")
        # "xyabcdz": answer chars [2, 6) -> tokens [0,3) [3,6) => tokens 0 and 1
        self.assertEqual((a, b), (0, 2))

    def test_custom_template_and_missing_placeholder(self):
        ids, (a, b) = creditflow.gold_target("42", creditflow.byte_tokenizer, "Answer: {gold}.")
        self.assertEqual(bytes(ids[a:b]), b"42")
        with self.assertRaises(ValueError):
            creditflow.gold_target("42", creditflow.byte_tokenizer, "no placeholder")

    def test_no_tokenizer_no_gold_target(self):
        t = build_trajectory(**base(tokenize=None))
        self.assertEqual(list(t["gold_target"]), [])
        self.assertEqual(t["gold_span"], (0, 0))

    def test_blank_first_gold_no_gold_target(self):
        # The score stage gives such a trajectory no process scores (credit.Blank is str.strip).
        for gold in ("", " \t\n", "\u00a0\u3000"):
            t = build_trajectory(**base(gold_answers=[gold, "Paris"]))
            self.assertEqual(list(t["gold_target"]), [])
            self.assertEqual(t["gold_span"], (0, 0))
        with self.assertRaises(InvalidTrajectory) as cm:
            creditflow.gold_target("", creditflow.byte_tokenizer)
        self.assertEqual(cm.exception.reason, "bad_span")


class Validation(unittest.TestCase):
    """The processor's rules (Go schemas.ValidateTrajectory), one case per rule."""

    CASES = [
        ("invalid", "trajectory_id", dict(trajectory_id="")),
        ("invalid", "trajectory_id", dict(trajectory_id="x" * 1025)),
        ("invalid", "prompt_id", dict(prompt_id="")),
        ("invalid", "group_size", dict(group_size=0)),
        ("invalid", "sample_index", dict(sample_index=-1)),
        ("invalid", "policy_version", dict(policy_version=-1)),
        ("invalid", "prompt", dict(prompt_ids=[])),
        ("invalid", "turns", dict(turns=[], rollout_logprobs=None)),
        ("invalid", "turns[1].kind", dict(turns=[("search", [4, 5], [6]), ("think", [8, 9])])),
        ("invalid", "turns[0].action", dict(turns=[("search", [], [6]), ("answer", [8, 9, 1, 2])])),
        ("too_many_turns", "turns", dict(turns=[("search", [1])] * 65, rollout_logprobs=None)),
        ("too_many_tokens", "turns", dict(prompt_ids=[1] * 131069)),
        ("token_out_of_range", "prompt", dict(prompt_ids=[1, 151936])),
        ("token_out_of_range", "turns[0].observation", dict(turns=[("search", [4, 5], [-1]), ("answer", [8, 9])])),
        ("non_finite_reward", "reward", dict(reward=math.nan)),
        ("non_finite_reward", "reward", dict(reward=math.inf)),
        ("missing_reward", "reward", dict(gold_answers=[], pred_answer=None)),
        ("invalid", "rollout_logprobs", dict(rollout_logprobs=[-0.1, -0.2])),
        ("invalid", "rollout_logprobs", dict(rollout_logprobs=[-0.1, -0.2, math.nan, -0.4])),
        ("invalid", "temperature", dict(temperature=0.0)),
        ("invalid", "temperature", dict(temperature=math.inf)),
    ]

    def test_each_rule(self):
        for reason, field, kw in self.CASES:
            with self.subTest(field=field, kw=str(kw)[:60]):
                with self.assertRaises(InvalidTrajectory) as cm:
                    build_trajectory(**base(**kw))
                self.assertEqual(cm.exception.reason, reason)
                self.assertEqual(cm.exception.field, field)
                self.assertIn(field, str(cm.exception))

    def test_valid_passes_and_limits_are_configurable(self):
        build_trajectory(**base())
        build_trajectory(**base(prompt_ids=[1] * 40070))  # a 40k-token agent trajectory, as the processor takes
        build_trajectory(**base(turns=[("think", [4, 5], [6]), ("answer", [8, 9])]),
                         limits=Limits(eligible_kinds=("think",)))
        with self.assertRaises(InvalidTrajectory):
            build_trajectory(**base(prompt_ids=[300]), limits=Limits(vocab_size=260))
        build_trajectory(**base(prompt_ids=[300]), limits=Limits(vocab_size=0))

    def test_bad_span_on_hand_built_record(self):
        t = build_trajectory(**base())
        for span in ((0, 0), (3, 2), (0, len(t["gold_target"]) + 1), (-1, 2)):
            t["gold_span"] = span
            with self.assertRaises(InvalidTrajectory) as cm:
                creditflow.validate_trajectory(t)
            self.assertEqual(cm.exception.reason, "bad_span")
        t["gold_target"], t["gold_span"] = [], (1, 2)
        with self.assertRaises(InvalidTrajectory) as cm:
            creditflow.validate_trajectory(t)
        self.assertEqual(cm.exception.reason, "bad_span")

    def test_reward_alone_is_enough(self):
        t = build_trajectory(**base(gold_answers=[], pred_answer=None, reward=0.0))
        self.assertEqual(t["reward"], 0.0)
        d = creditflow.decode_trajectory(creditflow.encode_trajectory(t))
        self.assertEqual(d["reward"], 0.0)
        np.testing.assert_array_equal(d["turns"][1]["action"], [8, 9])


class BuildArguments(unittest.TestCase):
    """build_trajectory refuses arguments of the wrong type or range with InvalidTrajectory
    naming the field, before anything is encoded."""

    CASES = [
        ("sample_index", dict(group_size=2, sample_index=5), "sample_index 5"),
        ("sample_index", dict(group_size=2, sample_index=2), "group_size 2"),
        ("sample_index", dict(sample_index=1.5), "integer"),
        ("group_size", dict(group_size=True), "integer"),
        ("policy_version", dict(policy_version="3"), "integer"),
        ("prompt", dict(prompt_ids="hello"), "prompt_ids"),
        ("prompt", dict(prompt_ids=b"hello"[:3]), "prompt_ids"),  # 3 bytes: not whole int32 ids
        ("prompt", dict(prompt_ids=[1, 2.0, 3]), "2.0"),
        ("prompt", dict(prompt_ids=[1, True, 3]), "True"),
        ("prompt", dict(prompt_ids=np.array([1.0, 2.0])), "float"),
        ("turns[0].action", dict(turns=[("search", [4, 5.5], [6, 7]), ("answer", [8, 9])]), "5.5"),
        ("turns[0].observation", dict(turns=[("search", [4, 5], [6.0, 7]), ("answer", [8, 9])]), "6.0"),
        ("turns[1].action", dict(turns=[("search", [4, 5], [6, 7]), ("answer", "ab")]), "str"),
        ("turns[0].observation", dict(turns=[dict(kind="search", action=[4, 5], observation=[False]),
                                             ("answer", [8, 9])]), "False"),
    ]

    def test_each_argument(self):
        for field, kw, detail in self.CASES:
            with self.subTest(field=field, kw=str(kw)[:60]):
                with self.assertRaises(InvalidTrajectory) as cm:
                    build_trajectory(**base(**kw))
                self.assertEqual(cm.exception.reason, "invalid")
                self.assertEqual(cm.exception.field, field)
                self.assertIn(field, str(cm.exception))
                self.assertIn(detail, str(cm.exception))

    def test_integer_types_are_accepted(self):
        t = build_trajectory(**base(group_size=np.int64(5), sample_index=np.int32(4),
                                    prompt_ids=np.array([1, 2, 3], dtype=np.int32),
                                    turns=[("search", np.array([4, 5], dtype=np.uint16), (6, 7)),
                                           ("answer", [np.int64(8), 9])]))
        self.assertEqual(t["sample_index"], 4)
        d = creditflow.decode_trajectory(creditflow.encode_trajectory(t))
        np.testing.assert_array_equal(d["prompt"], [1, 2, 3])
        np.testing.assert_array_equal(d["turns"][0]["observation"], [6, 7])


if __name__ == "__main__":
    unittest.main()
