"""Building and validating trajectories before they are sent.

validate_trajectory applies the processor's rules (schemas.ValidateTrajectory in Go, listed
in docs/wire-format.md) with the same limits and the same reason codes, so a trajectory that
passes here is not dead-lettered for its content by the score stage.
"""

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Limits", "InvalidTrajectory", "build_trajectory", "validate_trajectory",
           "gold_target", "byte_tokenizer", "DEFAULT_TEMPLATE"]

#: The LAPO scoring template (docs/method.md); ``{gold}`` is replaced by the first gold answer.
DEFAULT_TEMPLATE = "<think>Now there's enough information to answer</think>\n<answer>{gold}</answer>"

STANDARD_KINDS = ("search", "answer", "tool", "other")
MAX_ID_BYTES = 1024


@dataclass
class Limits:
    """The processor's limits (Go: schemas.DefaultLimits). vocab_size <= 0 checks only that
    ids are non-negative; max_* <= 0 disables that check."""

    vocab_size: int = 151936
    max_turns: int = 64
    max_tokens: int = 131072  # 128k-token agent trajectories
    max_record_bytes: int = 4 << 20
    eligible_kinds: tuple = field(default=("search",))

    def known_kind(self, kind):
        return kind in STANDARD_KINDS or kind in self.eligible_kinds


class InvalidTrajectory(ValueError):
    """A trajectory the processor would dead-letter. ``reason`` is the processor's reason
    code (invalid, too_many_turns, too_many_tokens, token_out_of_range, bad_span,
    non_finite_reward, missing_reward, too_large), ``field`` the offending field."""

    def __init__(self, reason, field_, detail):
        super().__init__("%s: %s: %s" % (field_, reason, detail))
        self.reason, self.field, self.detail = reason, field_, detail


def _ids(x):
    if x is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return np.frombuffer(x, dtype="<i4").astype(np.int64)
    return np.asarray(x, dtype=np.int64).reshape(-1)


def _int_arg(name, v):
    """v as an int, or InvalidTrajectory naming the argument: a bool, a float or a str is
    refused, not rounded or parsed."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise InvalidTrajectory("invalid", name, "%s must be an integer, got %r (%s)" % (name, v, type(v).__name__))
    return int(v)


def _token_ids(field_, what, x):
    """Token ids given to build_trajectory as an int64 array: a sequence or array of integers,
    or little-endian int32 bytes; None is no tokens. A str, a float, a bool or bytes that are
    not whole int32 values raise InvalidTrajectory naming the field."""
    if x is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(x, str):
        raise InvalidTrajectory("invalid", field_, "%s must be token ids, not a str (tokenize the text first)" % what)
    if isinstance(x, (bytes, bytearray, memoryview)):
        if len(x) % 4:
            raise InvalidTrajectory("invalid", field_, "%s as bytes must be little-endian int32 ids (a multiple of 4 "
                                    "bytes), got %d bytes" % (what, len(x)))
        return np.frombuffer(x, dtype="<i4").astype(np.int64)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "iu":
            raise InvalidTrajectory("invalid", field_, "%s must be integer token ids, got an array of %s" % (what, x.dtype))
        return x.astype(np.int64).reshape(-1)
    try:
        xs = list(x)
    except TypeError:
        raise InvalidTrajectory("invalid", field_, "%s must be a sequence of token ids, got %s" % (what, type(x).__name__)) from None
    if not all(type(v) is int for v in xs):  # the common case in one pass; else find the offender
        for k, v in enumerate(xs):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidTrajectory("invalid", field_, "%s must be integer token ids: item %d is %r (%s)"
                                        % (what, k, v, type(v).__name__))
    return np.asarray(xs, dtype=np.int64)


def _check_ids(tid, field_, ids, vocab):
    bad = (ids < 0) if vocab <= 0 else ((ids < 0) | (ids >= vocab))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidTrajectory("token_out_of_range", field_, "trajectory %s: %s token %d is id %d, outside [0, %d)"
                                % (tid, field_, i, int(ids[i]), vocab))


def validate_trajectory(t: dict, limits: Limits = None) -> None:
    """Raises InvalidTrajectory naming the field when the score stage would dead-letter `t`
    for its content. Rules and order follow Go's schemas.ValidateTrajectory."""
    lim = limits or Limits()
    tid = t.get("trajectory_id") or ""
    pid = t.get("prompt_id") or ""
    if not isinstance(tid, str) or not 1 <= len(tid.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        raise InvalidTrajectory("invalid", "trajectory_id", "must be 1..%d bytes of UTF-8" % MAX_ID_BYTES)
    if not isinstance(pid, str) or not 1 <= len(pid.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        raise InvalidTrajectory("invalid", "prompt_id", "trajectory %s: must be 1..%d bytes of UTF-8" % (tid, MAX_ID_BYTES))
    for f, v in (("trajectory_id", tid), ("prompt_id", pid)):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidTrajectory("invalid", f, "trajectory %r: must be valid UTF-8" % tid) from None
    if int(t.get("group_size", 0)) < 1:
        raise InvalidTrajectory("invalid", "group_size", "trajectory %s: group_size %s must be >= 1" % (tid, t.get("group_size")))
    if int(t.get("sample_index", -1)) < 0:
        raise InvalidTrajectory("invalid", "sample_index", "trajectory %s: sample_index %s must be >= 0" % (tid, t.get("sample_index")))
    if int(t.get("policy_version", -1)) < 0:
        raise InvalidTrajectory("invalid", "policy_version", "trajectory %s: policy_version %s must be >= 0" % (tid, t.get("policy_version")))
    prompt = _ids(t.get("prompt"))
    if prompt.size == 0:
        raise InvalidTrajectory("invalid", "prompt", "trajectory %s: empty prompt" % tid)
    turns = t.get("turns") or []
    if not turns:
        raise InvalidTrajectory("invalid", "turns", "trajectory %s: no turns" % tid)
    if lim.max_turns > 0 and len(turns) > lim.max_turns:
        raise InvalidTrajectory("too_many_turns", "turns", "trajectory %s: %d turns exceed the limit of %d" % (tid, len(turns), lim.max_turns))
    total, policy = prompt.size, 0
    parsed = []
    for i, tu in enumerate(turns):
        if not lim.known_kind(tu.get("kind")):
            raise InvalidTrajectory("invalid", "turns[%d].kind" % i,
                                    "trajectory %s: turn %d has unknown kind %r (want search, answer, tool, other or a "
                                    "configured eligible kind)" % (tid, i, tu.get("kind")))
        act, obs = _ids(tu.get("action")), _ids(tu.get("observation"))
        if act.size == 0:
            raise InvalidTrajectory("invalid", "turns[%d].action" % i, "trajectory %s: turn %d has no action tokens" % (tid, i))
        total += act.size + obs.size
        policy += act.size
        parsed.append((act, obs))
    if lim.max_tokens > 0 and total > lim.max_tokens:
        raise InvalidTrajectory("too_many_tokens", "turns", "trajectory %s: %d tokens exceed the limit of %d" % (tid, total, lim.max_tokens))
    gold = _ids(t.get("gold_target"))
    if lim.max_tokens > 0 and gold.size > lim.max_tokens:
        raise InvalidTrajectory("too_many_tokens", "gold_target", "trajectory %s: gold target of %d tokens exceeds the limit of %d"
                                % (tid, gold.size, lim.max_tokens))
    _check_ids(tid, "prompt", prompt, lim.vocab_size)
    for i, (act, obs) in enumerate(parsed):
        _check_ids(tid, "turns[%d].action" % i, act, lim.vocab_size)
        _check_ids(tid, "turns[%d].observation" % i, obs, lim.vocab_size)
    _check_ids(tid, "gold_target", gold, lim.vocab_size)
    span = t.get("gold_span")
    a, b = (span[0], span[1]) if span is not None else (t.get("gold_span_start", 0), t.get("gold_span_end", 0))
    if gold.size > 0:
        if a < 0 or a >= b or b > gold.size:
            raise InvalidTrajectory("bad_span", "gold_span", "trajectory %s: gold span [%d, %d) is not a non-empty range inside the "
                                    "%d-token gold target" % (tid, a, b, gold.size))
    elif a != 0 or b != 0:
        raise InvalidTrajectory("bad_span", "gold_span", "trajectory %s: gold span [%d, %d) without a gold target" % (tid, a, b))
    reward = t.get("reward")
    if reward is not None:
        if not math.isfinite(float(reward)):
            raise InvalidTrajectory("non_finite_reward", "reward", "trajectory %s: reward is %r" % (tid, reward))
    elif not t.get("gold_answers"):
        raise InvalidTrajectory("missing_reward", "reward", "trajectory %s: no reward and no gold answers to compute one from" % tid)
    lps = t.get("rollout_logprobs")
    if lps is not None:
        lp = np.frombuffer(lps, dtype="<f4") if isinstance(lps, (bytes, bytearray, memoryview)) else np.asarray(lps, dtype=np.float32).reshape(-1)
        if lp.size != policy:
            raise InvalidTrajectory("invalid", "rollout_logprobs", "trajectory %s: %d rollout log-probs for %d policy tokens" % (tid, lp.size, policy))
        nf = ~np.isfinite(lp)
        if nf.any():
            i = int(np.argmax(nf))
            raise InvalidTrajectory("invalid", "rollout_logprobs", "trajectory %s: rollout log-prob %d is %r" % (tid, i, float(lp[i])))
    temp = t.get("temperature")
    if temp is not None:
        x = float(np.float32(temp))
        if not math.isfinite(x) or x <= 0:
            raise InvalidTrajectory("invalid", "temperature", "trajectory %s: temperature %r must be finite and > 0" % (tid, temp))


def gold_target(gold: str, tokenize, template: str = DEFAULT_TEMPLATE):
    """Tokenizes the scoring template filled with `gold` and returns (ids, (a, b)): the token
    span [a, b) is every token whose character range overlaps the gold answer's.

    ``tokenize(text) -> (ids, char_offsets)`` with one ``(start, end)`` character range per
    token (a Hugging Face fast tokenizer's ``offset_mapping`` fits; tokens with an empty
    range, such as special tokens, never count).
    """
    if "{gold}" not in template:
        raise ValueError("template must contain {gold} where the gold answer goes")
    prefix, suffix = template.split("{gold}", 1)
    text = prefix + gold + suffix
    cs, ce = len(prefix), len(prefix) + len(gold)
    ids, offsets = tokenize(text)
    ids = [int(x) for x in ids]
    if len(offsets) != len(ids):
        raise ValueError("tokenize returned %d ids but %d offsets" % (len(ids), len(offsets)))
    a = b = None
    for k, (s, e) in enumerate(offsets):
        if e > s and s < ce and e > cs:
            if a is None:
                a = k
            b = k + 1
    if a is None:
        raise InvalidTrajectory("bad_span", "gold_answers", "no token of the tokenized template overlaps the gold answer %r" % gold)
    return ids, (a, b)


def byte_tokenizer(text: str):
    """UTF-8 bytes as token ids (0..255), the tokenization of creditflow's built-in tiny
    model; offsets are each byte's character range."""
    ids, offsets = [], []
    for i, ch in enumerate(text):
        bs = ch.encode("utf-8")
        ids.extend(bs)
        offsets.extend([(i, i + 1)] * len(bs))
    return ids, offsets


def build_trajectory(*, trajectory_id, prompt_id, group_size, sample_index, prompt_ids, turns,
                     policy_version, reward=None, pred_answer=None, gold_answers=(), tokenize=None,
                     template=DEFAULT_TEMPLATE, rollout_logprobs=None, temperature=None,
                     created_at_ms=None, source=None, limits=None) -> dict:
    """Builds a validated trajectory dict for encode_trajectory / RolloutPublisher.publish.

    - `turns`: ``(kind, action_ids, observation_ids)`` tuples or dicts with those keys; the
      observation may be omitted/None for a turn without one (typically the final answer).
    - the outcome reward: `reward`, or `pred_answer` + `gold_answers` (the stage computes
      the best F1).
    - with `gold_answers` and `tokenize`, the LAPO gold target (`template` filled with the
      first gold answer) and its token span are filled in; without `tokenize`, or when the
      first gold answer is empty or only whitespace, there is no gold target and LAPO gives
      no process credit for this trajectory (as the score stage decides).
    - `rollout_logprobs`: one per action token over all turns, in order.

    Raises InvalidTrajectory (with .reason and .field) for anything the processor would
    dead-letter, and for arguments of the wrong kind: counts (`group_size`, `sample_index`,
    `policy_version`) that are not integers, a `sample_index` not below `group_size`, token
    ids that are not integers (floats, bools) or given as a str.
    """
    group_size = _int_arg("group_size", group_size)
    sample_index = _int_arg("sample_index", sample_index)
    policy_version = _int_arg("policy_version", policy_version)
    if group_size >= 1 and sample_index >= group_size:
        raise InvalidTrajectory("invalid", "sample_index", "trajectory %s: sample_index %d must be < group_size %d "
                                "(members are numbered 0..group_size-1)" % (trajectory_id, sample_index, group_size))
    prompt = _token_ids("prompt", "prompt_ids", prompt_ids)
    ts = []
    for i, tu in enumerate(turns):
        if isinstance(tu, dict):
            kind, act, obs = tu.get("kind"), tu.get("action"), tu.get("observation")
        else:
            if isinstance(tu, str) or len(tu) not in (2, 3):
                raise InvalidTrajectory("invalid", "turns[%d]" % i, "a turn is (kind, action_ids[, observation_ids])")
            kind, act, obs = tu[0], tu[1], (tu[2] if len(tu) == 3 else None)
        ts.append({"kind": kind, "action": _token_ids("turns[%d].action" % i, "the action", act),
                   "observation": _token_ids("turns[%d].observation" % i, "the observation", obs)})
    t = {
        "trajectory_id": trajectory_id, "prompt_id": prompt_id,
        "group_size": group_size, "sample_index": sample_index,
        "policy_version": policy_version,
        "created_at_ms": int(time.time() * 1000) if created_at_ms is None else int(created_at_ms),
        "prompt": prompt, "turns": ts,
        "reward": None if reward is None else float(reward),
        "pred_answer": pred_answer, "gold_answers": list(gold_answers or []),
        "gold_target": [], "gold_span": (0, 0),
        "rollout_logprobs": None if rollout_logprobs is None else np.asarray(rollout_logprobs, dtype=np.float32),
        "temperature": None if temperature is None else float(temperature),
        "source": source,
    }
    # A first gold answer that is empty or only whitespace gives no gold target: the score
    # stage would give such a trajectory no process scores anyway (docs/method.md §2.1).
    if t["gold_answers"] and tokenize is not None and t["gold_answers"][0].strip():
        ids, span = gold_target(t["gold_answers"][0], tokenize, template)
        t["gold_target"], t["gold_span"] = ids, span
    validate_trajectory(t, limits)
    return t
