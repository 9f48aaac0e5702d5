"""Where AttnSR's step shares land on the turns the world labelled (docs/learn.md, "Where
AttnSR's attention puts the budget").

AttnSR splits each trajectory's budget ``B_i = β · C_i · (R_i − R̄)`` over its non-terminal
steps by the shares ``p_{i,k}`` (docs/method.md §3.2–3.3: ``s_{i,k} = B_i · p_{i,k}``, ``k < K``).
An even spread gives each of the ``K − 1`` steps ``1/(K − 1)``. The worlds know which turns
helped and which hurt (``creditflow.learn.oracle``: the workers write the labels beside each
trajectory); this module reads a sample's published shares against them, with the labels paid
once (``oracle.once``: the first turn that showed the evidence and the walk that enabled it;
every harmful turn), so that a turn repeated after the evidence is not counted as helpful:

- ``helpful_p`` / ``helpful_even``: the shares the sample's helpful turns got, and what an even
  spread would have given them (their count over ``K − 1``); their ratio summed over samples is
  the attention's enrichment of the right moves (1 for an even spread);
- ``helpful_top``: whether the largest share is on a helpful turn (a tie split evenly among the
  tied turns, so an even spread reads its chance, ``helpful_even``);
- ``helpful_reward`` / ``helpful_reward_even``: the step rewards those turns got, signed, and
  what the even spread of the same budget would have paid them;
- ``helpful_len``: the share an allocation proportional to each step's length would give them
  (its action and observation tokens over those of all ``K − 1`` steps: the attention mass a step
  collects grows with its tokens, so a step with a long observation is favoured by length
  alone);
- the same for the harmful turns.

Only samples with at least two non-terminal steps and a share on each are read (with one the
share is 1 whatever the attention says).
"""

from . import oracle as O

__all__ = ["where_credit_lands", "batch_allocation"]

FIELDS = ("samples", "helpful_samples", "helpful_p", "helpful_even", "helpful_len", "helpful_top", "helpful_reward",
          "helpful_reward_even", "harmful_samples", "harmful_p", "harmful_even", "harmful_len", "harmful_top",
          "harmful_reward", "harmful_reward_even")


def where_credit_lands(sample, labels):
    """The reading of one sample (a dict of FIELDS, counts as 0/1), or None when the sample has
    fewer than two non-terminal steps or a step without a share (not AttnSR, or K < 3)."""
    turns = sample.get("turns") or []
    k_last = len(turns) - 1
    if k_last < 2:
        return None
    p = [t.get("p") for t in turns[:k_last]]
    s = [t.get("step_reward") for t in turns[:k_last]]
    if any(x is None for x in p) or any(x is None for x in s):
        return None
    O.check_labels(sample, labels)  # its action runs, turns and labels agree, as for the oracle term
    spans = O.turn_spans(sample["loss_mask"])
    # step k's tokens: its action and the observation after it, up to the next action
    length = [spans[k + 1][0] - spans[k][0] for k in range(k_last)]
    lab = O.once(labels)
    budget = sum(s)
    out = {"samples": 1}
    pmax = max(p)
    top = [k for k, x in enumerate(p) if x == pmax]  # every step in a tie
    for name, turns_of in (("helpful", lab["key_turns"] + lab["enabling_turns"]), ("harmful", lab["harmful_turns"])):
        ks = sorted({k for k in turns_of if 0 <= k < k_last})
        even = len(ks) / k_last
        out.update({name + "_samples": int(bool(ks)), name + "_p": sum(p[k] for k in ks), name + "_even": even,
                    name + "_len": sum(length[k] for k in ks) / sum(length),
                    name + "_top": sum(k in ks for k in top) / len(top), name + "_reward": sum(s[k] for k in ks),
                    name + "_reward_even": budget * even})
    return out


def batch_allocation(batch, reader):
    """The batch's readings summed, as the trainer's per-step fields ``alloc_<field>`` (floats
    rounded to 6 digits); labels from ``reader`` (an ``oracle.LabelReader``)."""
    tot = dict.fromkeys(FIELDS, 0)
    for s in batch:
        r = where_credit_lands(s, reader.get(s["trajectory_id"]))
        if r is not None:
            for k in FIELDS:
                tot[k] += r[k]
    return {"alloc_" + k: (round(v, 6) if isinstance(v, float) else v) for k, v in tot.items()}
