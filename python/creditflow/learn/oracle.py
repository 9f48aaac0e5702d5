"""The oracle-credit arm (docs/learn.md, "The oracle-credit arm").

GRPO's outcome advantage on every policy token, plus ``+λ`` on the action tokens of each turn
the world knows helped and ``−λ`` on those of each turn it knows hurt. The world's labels live
on the worker's ``Episode`` (``key_turns``; ``enabling_turns`` in household-long;
``harmful_turns`` in rumour and household-long), not in the published trajectory, so the
workers write them beside it: one JSON line per trajectory in a labels folder of the run
(``LabelWriter``), before the trajectory is published. The trainer reads them (``LabelReader``)
and adds the term (``oracle_term``) to the advantages creditflow computed with λ = 0.

With the ppo loss (the arm ``ppo+oracle``, the control of AttnSR's PPO setup) the labels become
step rewards instead (``oracle_step_rewards``): ``±λ`` on the last action token of each labelled
turn, where AttnSR's ppo output puts its step rewards ``s_{i,k}`` (docs/method.md §3.3), added
to the terminal reward of PPO's token rewards before GAE.

Signs: a key turn (its observation held the evidence) and an enabling turn (the walk into the
office, without which the desk cannot be opened) get ``+λ``; a harmful turn (its observation
named a wrong answer: a rumour, an old note) gets ``−λ``. No world here labels a turn twice.

Turn ``k``'s action tokens are the ``k``-th run of ones in the sample's ``loss_mask``: a
sample's tokens are the prompt, then each turn's action and observation in order, the policy
tokens are exactly the actions, every action has at least one token and every observation
before the last action has at least one (the worlds always answer). A sample whose runs do not
number its turns is an error, never a guess.
"""

import glob
import json
import os

import numpy as np

__all__ = ["LabelWriter", "LabelReader", "MissingLabels", "labels_of", "once", "turn_spans", "check_labels",
           "oracle_term", "oracle_step_rewards"]


class MissingLabels(ValueError):
    """A sample the trainer cannot give the oracle term: no labels, or turns it cannot map."""


def labels_of(ep):
    """The labels of a finished episode: the turns that helped (key and enabling) and hurt."""
    return {"key_turns": list(getattr(ep, "key_turns", []) or []),
            "enabling_turns": list(getattr(ep, "enabling_turns", []) or []),
            "harmful_turns": list(getattr(ep, "harmful_turns", []) or []),
            "turns": len(ep.turns)}


def once(labels):
    """The labels paid once (``--oracle-once``): the first key turn only, the enabling turn
    that preceded it (the last one before it; none without a key turn), every harmful turn. A
    world that labels each walk into the office or each opening of the desk pays a policy that
    walks in and out, or opens the desk again, as much as one that solves the task; paid once,
    the labels pay only the path to the first evidence."""
    key = sorted(labels.get("key_turns") or [])[:1]
    enabling = [t for t in (labels.get("enabling_turns") or []) if key and t < key[0]]
    return dict(labels, key_turns=key, enabling_turns=sorted(enabling)[-1:])


class LabelWriter:
    """Appends one JSON line per trajectory to `path` and flushes it before returning, so a
    trajectory published afterwards always has its line on disk. Each worker (and each
    restart of one) writes its own file."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "a", encoding="utf-8")

    def write(self, trajectory_id, ep):
        rec = dict(labels_of(ep), trajectory_id=trajectory_id)
        self.f.write(json.dumps(rec, sort_keys=True) + "\n")
        self.f.flush()

    def close(self):
        self.f.close()


class LabelReader:
    """The labels of the trajectories in folder `root` (every ``*.jsonl`` in it), read
    incrementally: each call of get reads what the workers appended since, complete lines
    only."""

    def __init__(self, root):
        self.root = root
        self.labels = {}
        self.offsets = {}

    def _refresh(self):
        for path in sorted(glob.glob(os.path.join(self.root, "*.jsonl"))):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            for line in data[:end].splitlines():
                if line.strip():
                    rec = json.loads(line)
                    self.labels[rec["trajectory_id"]] = rec
            self.offsets[path] = self.offsets.get(path, 0) + end

    def get(self, trajectory_id):
        if trajectory_id not in self.labels:
            self._refresh()
        rec = self.labels.get(trajectory_id)
        if rec is None:
            raise MissingLabels("no oracle labels for trajectory %s in %s: the workers write them there before "
                                "publishing (run the oracle method through creditflow learn)" % (trajectory_id, self.root))
        return rec


def turn_spans(loss_mask):
    """[(start, end), …]: the runs of ones in loss_mask, in order (turn k's action tokens)."""
    m = np.asarray(loss_mask).astype(bool).astype(np.int8)
    d = np.diff(np.concatenate(([0], m, [0])))
    return list(zip(np.nonzero(d == 1)[0].tolist(), np.nonzero(d == -1)[0].tolist()))


def check_labels(sample, labels):
    """Raises MissingLabels when the labels cannot be mapped to the sample's tokens (what
    oracle_term and oracle_step_rewards would raise), without building either."""
    _signed_spans(sample, labels)


def _signed_spans(sample, labels):
    """[(sign, (start, end)), …]: the action tokens of each labelled turn with its sign (+1 key
    and enabling, −1 harmful). Raises MissingLabels when the sample's action runs do not number
    its turns or a label names a turn it does not have."""
    tid = sample.get("trajectory_id")
    mask = sample["loss_mask"]
    spans = turn_spans(mask)
    n = labels.get("turns")
    diag = sample.get("turns")
    if n is None or len(spans) != n or (diag is not None and len(diag) != n):
        raise MissingLabels("trajectory %s: %d action runs in its loss_mask, %s turns in its labels and %s in the "
                            "sample: the turns cannot be mapped to tokens"
                            % (tid, len(spans), n, None if diag is None else len(diag)))
    out = []
    for sign, key in ((1.0, "key_turns"), (1.0, "enabling_turns"), (-1.0, "harmful_turns")):
        for t in labels.get(key) or []:
            if not 0 <= t < n:
                raise MissingLabels("trajectory %s: %s names turn %d of %d" % (tid, key, t, n))
            out.append((sign, spans[t]))
    return out


def oracle_term(sample, labels, lam):
    """The oracle term of one sample as float32, aligned with its tokens: +lam on the action
    tokens of its key and enabling turns, −lam on those of its harmful turns, 0 elsewhere.
    Raises MissingLabels when its action runs do not number its turns."""
    out = np.zeros(len(sample["loss_mask"]), dtype=np.float32)
    for sign, (a, b) in _signed_spans(sample, labels):
        out[a:b] += sign * lam
    return out


def oracle_step_rewards(sample, labels, lam):
    """The oracle's step rewards of one sample as float32, aligned with its tokens (the ppo
    loss): +lam on the last action token of each key and enabling turn, −lam on that of each
    harmful turn, 0 elsewhere; added to the sample's token rewards before GAE. Raises
    MissingLabels like oracle_term."""
    out = np.zeros(len(sample["loss_mask"]), dtype=np.float32)
    for sign, (_, b) in _signed_spans(sample, labels):
        out[b - 1] += sign * lam
    return out
