"""The rewards a worker publishes, and the gold it gives the scorer (docs/learn.md, "Controls
for the noisy judge").

- ``judge`` (the default): the flaky judge's verdict, wrong with probability ``noise``
  (``creditflow.envs.judge``).
- ``likelihood``: the gold answer's likelihood given the whole pre-answer context, as the LAPO
  scorer reads it (docs/method.md eq. 2.4a with nothing left out): ``exp(S(c_full))``, ``S`` the
  mean log-probability of the gold span of the scoring template at the rollout's temperature,
  under the policy that played the episode. No judge is involved: GRPO then sees the gold
  through the same clean likelihood LAPO reads, but only per episode, never per turn.
- ``gold-bonus``: the judge's verdict plus ``bonus`` when the gold string appears in any
  observation of the episode (a retrieval bonus per episode).
- ``likelihood-bonus``: the judge's verdict plus ``bonus`` times the ``likelihood`` above: the
  same clean likelihood LAPO reads and the same noisy verdict, added per episode instead of
  split per turn (LAPO's ``A_out + λ·A_proc`` without the turns).

``scorer_gold`` is the label-noise arm's gold: the answer the judge believes. Where the judge
errs (the same draw as ``judge``), it is the policy's own answer when that answer was wrong (the
judge accepted it), else a wrong name drawn from the trajectory id (the judge rejected the
right one); elsewhere it is the true gold.
"""

import math
import random

import torch

from .. import envs as E
from .. import policy as P
from ..trajectory import DEFAULT_TEMPLATE, byte_tokenizer, gold_target

__all__ = ["REWARDS", "pre_answer_context", "gold_likelihood", "gold_in_observation", "scorer_gold", "reward_of"]

REWARDS = ("judge", "likelihood", "gold-bonus", "likelihood-bonus")


def pre_answer_context(ep, turns):
    """Token ids of the prompt and every turn before the answer turn (actions and observations),
    as the episode's policy saw them when it wrote the answer."""
    ids = list(P.encode(ep.prompt))
    for kind, act, _, obs in turns:
        if kind == "answer":
            break
        ids += list(act) + list(obs)
    return ids


def gold_likelihood(model, ep, turns, temperature=1.0, template=DEFAULT_TEMPLATE):
    """``exp(S)``: S the mean log-probability, at ``temperature``, of the gold span of
    ``template`` filled with the episode's gold, after the pre-answer context (a number in
    (0, 1], the geometric mean of the span's token probabilities)."""
    ctx = pre_answer_context(ep, turns)
    tgt, (a, b) = gold_target(ep.gold, byte_tokenizer, template)
    ids = torch.tensor([ctx + tgt], dtype=torch.long)
    with torch.no_grad():
        lp = P.token_logprobs(model, ids, float(temperature))[0]  # lp[j-1] = log p(ids[j] | ids[<j])
    span = lp[len(ctx) + a - 1:len(ctx) + b - 1]
    return math.exp(float(span.double().mean()))


def gold_in_observation(ep):
    """Whether the gold string appears in any observation of the episode."""
    return any(ep.gold in obs for _, _, obs in ep.turns if obs)


def scorer_gold(ep, noise, key):
    """The gold the label-noise arm gives the scorer: what the judge believes (module doc)."""
    if not E.judge_errs(noise, key):
        return ep.gold
    if not ep.correct and ep.answer and ep.answer != ep.gold:
        return ep.answer
    wrong = [n for n in E.NAMES if n != ep.gold]
    return random.Random("label/" + key).choice(wrong)


def reward_of(kind, ep, turns, key, *, noise=0.0, bonus=0.5, model=None, temperature=1.0):
    """The published reward of a finished episode for reward ``kind`` (module doc)."""
    if kind == "judge":
        return E.judge(ep, noise, key)
    if kind == "likelihood":
        return gold_likelihood(model, ep, turns, temperature)
    if kind == "gold-bonus":
        return E.judge(ep, noise, key) + (bonus if gold_in_observation(ep) else 0.0)
    if kind == "likelihood-bonus":
        return E.judge(ep, noise, key) + bonus * gold_likelihood(model, ep, turns, temperature)
    raise ValueError("reward %r: use one of %s" % (kind, ", ".join(REWARDS)))
