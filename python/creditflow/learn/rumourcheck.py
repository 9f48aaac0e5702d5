"""Does a rumour in context hurt the starting policy? (docs/learn.md, "The rumour world")

usage: python3 -m creditflow.learn.rumourcheck --init DIR [--seeds 1,2,3] [--episodes 200] [--free 200] [--out FILE]

Paired episodes of the rumour world (creditflow.envs.Rumour) with the searches forced: the
atlas at one of the six turns, prose sources at four, and at the remaining turn (the slot) a
rumour source in one arm and a prose source in the other; everything else (question, gold
name, wrong name, the other five searches, their observations) is the same in both arms. The
policy writes only the answer. Per episode and arm it reports, exactly (no sampling):

- ``p_gold``: the probability that the policy, sampling at temperature 1, answers the gold
  name (the product of its token probabilities for ``<answer>GOLD</answer>``);
- ``p_wrong``: the same for the rumour's name;
- ``greedy``: whether its greedy answer is the gold name;
- ``lapo_delta``: LAPO's backward Δ of the slot's turn (docs/method.md): log π of the gold
  target with the turn minus the same without it (the five other searches only).

Each seed is its own set of episodes; the differences are paired by episode. ``--free N`` also
plays N episodes per seed with the policy choosing its own searches (temperature 1, a
generator seeded by the seed) and reports how often a rumour reaches the context and what it
costs there. Float32, one thread: the same arguments print the same numbers.
"""

import argparse
import json
import math
import random
import statistics
import sys

import torch

from .. import envs as E
from .. import policy as P
from ..trajectory import DEFAULT_TEMPLATE
from . import rollout


def plan(env, seed):
    """The forced searches of episode `seed`: (queries with the slot empty, slot, rumour, prose)."""
    r = random.Random("rumourcheck/%d" % seed)
    prose = [o for o in env.options if o != env.reliable and o not in env.rumours]
    a, slot = r.sample(range(env.info_turns), 2)
    qs = [r.choice(prose) for _ in range(env.info_turns)]
    qs[a], qs[slot] = env.reliable, None
    return qs, slot, r.choice(env.rumours), r.choice(prose)


def forced(env, seed, arm):
    """The episode of `seed` in `arm` ('rumour' or 'prose') after its six searches, and its
    context ids; arm 'removed': the five other searches only (LAPO's c_−t for the slot)."""
    qs, slot, rumour, prose = plan(env, seed)
    qs[slot] = rumour if arm == "rumour" else prose
    if arm == "removed":
        del qs[slot]
    ep = env.reset(seed)
    ids = P.encode(ep.prompt)
    for q in qs:
        act = env.format_query(q)
        ids += P.encode(act) + P.encode(env.step(ep, act))
    return ep, ids


def answer_logprob(model, contexts, answers):
    """log π(answer | context) for each pair, at temperature 1."""
    rows = [c + P.encode(a) for c, a in zip(contexts, answers)]
    n = max(len(x) for x in rows)
    ids = torch.full((len(rows), n), P.PAD, dtype=torch.long)
    for i, x in enumerate(rows):
        ids[i, :len(x)] = torch.tensor(x)
    with torch.no_grad():
        lp = P.token_logprobs(model, ids, 1.0)
    out = []
    for i, (c, a) in enumerate(zip(contexts, answers)):
        out.append(float(lp[i, len(c) - 1:len(c) - 1 + len(P.encode(a))].double().sum()))
    return out


def paired(model, env, seeds, batch=50):
    """Per episode: {seed, slot_after_atlas, rumour: {...}, prose: {...}}. Each arm also
    carries ``lapo_delta``: LAPO's backward Δ of the slot's turn (docs/method.md), log π of the
    gold target (creditflow.trajectory.DEFAULT_TEMPLATE) with the turn minus without it."""
    rows = []
    for b in range(0, len(seeds), batch):
        chunk = seeds[b:b + batch]
        res = {s: {"seed": s} for s in chunk}
        eps, ctx = zip(*[forced(env, s, "removed") for s in chunk])
        without = answer_logprob(model, ctx, [DEFAULT_TEMPLATE.format(gold=e.gold) for e in eps])
        for arm in ("rumour", "prose"):
            eps, ctx = zip(*[forced(env, s, arm) for s in chunk])
            full = answer_logprob(model, ctx, [DEFAULT_TEMPLATE.format(gold=e.gold) for e in eps])
            pg = answer_logprob(model, ctx, [env.format_answer(e, e.gold) for e in eps])
            pw = answer_logprob(model, ctx, [env.format_answer(e, e.wrong) for e in eps])
            acts = P.sample_actions(model, list(ctx), ["</answer>"] * len(ctx), max_tokens=env.max_action_bytes,
                                    temperature=0)
            for s, e, g, w, (a, _), f, o in zip(chunk, eps, pg, pw, acts, full, without):
                ans = env.parse_answer(P.decode(a))
                res[s][arm] = {"p_gold": math.exp(g), "p_wrong": math.exp(w), "greedy": ans == e.gold,
                               "greedy_wrong": ans == e.wrong, "lapo_delta": f - o, "delta_negative": f - o < 0}
                if arm == "rumour":
                    res[s]["slot_after_atlas"] = e.harmful_turns[0] > e.key_turns[0]
        rows += [res[s] for s in chunk]
    return rows


def free_play(model, env, seeds, gen_seed):
    """Episodes with the policy's own searches: how often a rumour reaches the context, and success with and without one."""
    gen = torch.Generator().manual_seed(gen_seed)
    played = [ep for ep, _ in rollout.play(model, env, seeds, temperature=1.0, generator=gen)]
    picks = {}
    for ep in played:
        for _, act, _ in ep.turns[:-1]:
            q = env.parse_query(act)
            picks[q or "(none)"] = picks.get(q or "(none)", 0) + 1

    def rate(xs):
        return (sum(e.correct for e in xs) / len(xs), len(xs)) if xs else (None, 0)

    found = [e for e in played if e.key_turns]
    return {
        "episodes": len(played), "success": rate(played)[0],
        "atlas_found": len(found) / len(played),
        "rumour_seen": sum(bool(e.harmful_turns) for e in played) / len(played),
        "success_atlas_and_rumour": rate([e for e in found if e.harmful_turns]),
        "success_atlas_no_rumour": rate([e for e in found if not e.harmful_turns]),
        "answered_rumour": sum(e.answer == e.wrong for e in played) / len(played),
        "searches": dict(sorted(picks.items())),
    }


def sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def summarize(rows):
    def mean(key, arm, sub=None):
        rs = rows if sub is None else [r for r in rows if r["slot_after_atlas"] == sub]
        return sum(float(r[arm][key]) for r in rs) / len(rs) if rs else None
    out = {"episodes": len(rows)}
    for key in ("p_gold", "p_wrong", "greedy", "greedy_wrong", "lapo_delta", "delta_negative"):
        out[key] = {"prose": mean(key, "prose"), "rumour": mean(key, "rumour")}
    out["p_gold_by_order"] = {name: {"episodes": sum(r["slot_after_atlas"] == sub for r in rows),
                                     "prose": mean("p_gold", "prose", sub), "rumour": mean("p_gold", "rumour", sub)}
                              for name, sub in (("rumour_before_atlas", False), ("rumour_after_atlas", True))}
    # paired by episode: greedy right in one arm only
    out["greedy_only_prose"] = sum(r["prose"]["greedy"] and not r["rumour"]["greedy"] for r in rows)
    out["greedy_only_rumour"] = sum(r["rumour"]["greedy"] and not r["prose"]["greedy"] for r in rows)
    return out


def by_episode(rows):
    """All episodes pooled, paired by episode: the mean difference of p_gold (prose − rumour)
    with its standard error, and the exact two-sided sign test of the greedy answers that are
    right in one arm only."""
    d = [r["prose"]["p_gold"] - r["rumour"]["p_gold"] for r in rows]
    only_p = sum(r["prose"]["greedy"] and not r["rumour"]["greedy"] for r in rows)
    only_r = sum(r["rumour"]["greedy"] and not r["prose"]["greedy"] for r in rows)
    n, k = only_p + only_r, min(only_p, only_r)
    p = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"episodes": len(rows), "p_gold_diff_mean": statistics.mean(d), "p_gold_diff_se": sd(d) / math.sqrt(len(d)),
            "p_gold_lower_with_rumour": sum(x > 0 for x in d) / len(d),
            "greedy_right_prose_only": only_p, "greedy_right_rumour_only": only_r, "sign_test_p": p,
            "rumour_delta_negative": sum(r["rumour"]["lapo_delta"] < 0 for r in rows) / len(rows),
            "prose_delta_negative": sum(r["prose"]["lapo_delta"] < 0 for r in rows) / len(rows)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="the policy's checkpoint folder")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--episodes", type=int, default=200, help="paired episodes per seed")
    ap.add_argument("--free", type=int, default=200, help="free-play episodes per seed (0: none)")
    ap.add_argument("--out", help="write the JSON here too")
    a = ap.parse_args(argv)
    rollout.setup_torch()
    env, model = E.make_env("rumour"), P.load(a.init)
    seeds = [int(s) for s in a.seeds.split(",")]
    per, rows = [], []
    for k in seeds:
        eps = [k * 1_000_000 + i for i in range(a.episodes)]
        rs = paired(model, env, eps)
        rows += rs
        s = {"seed": k, "paired": summarize(rs)}
        if a.free:
            s["free"] = free_play(model, env, [k * 1_000_000 + 500_000 + i for i in range(a.free)], k)
        per.append(s)
        print(json.dumps(s), file=sys.stderr)
    diff = {key: [s["paired"][key]["prose"] - s["paired"][key]["rumour"] for s in per]
            for key in ("p_gold", "greedy", "lapo_delta")}
    result = {"init": a.init, "world": "rumour", "episodes_per_seed": a.episodes, "seeds": per,
              "prose_minus_rumour": {key: {"mean": statistics.mean(v), "sd": sd(v), "per_seed": v} for key, v in diff.items()},
              "by_episode": by_episode(rows)}
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
