#!/usr/bin/env python3
"""Independent reference for `creditflow compute` (docs/method.md §1–§3.3, docs/offline.md).

Written from docs/method.md and docs/offline.md (including the choices marked
"ours"), not from the Go code: plain Python 3, standard library only.
Reads scored trajectories as JSON Lines on stdin, writes the docs/offline.md output
objects on stdout, reports late/repeated members on stderr.
"""
import argparse
import json
import math
import re
import string
import sys


# ---------- §1 outcome ----------

def normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in string.punctuation)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(pred, gold):
    p = normalize(pred).split()
    g = normalize(gold).split()
    if not p or not g:
        return 1.0 if (not p and not g) else 0.0
    remaining = {}
    for w in g:
        remaining[w] = remaining.get(w, 0) + 1
    common = 0
    for w in p:
        if remaining.get(w, 0) > 0:
            remaining[w] -= 1
            common += 1
    if common == 0:
        return 0.0
    prec = common / len(p)
    rec = common / len(g)
    return 2 * prec * rec / (prec + rec)


def reward_of(rec):
    if rec.get("reward") is not None:
        return float(rec["reward"])
    pred = rec.get("pred_answer")
    if pred is None:
        return 0.0
    return max([f1(pred, g) for g in rec.get("gold_answers") or []] + [0.0])


def mean(xs):
    total = 0.0
    for x in xs:
        total += x
    return total / len(xs)


def pstd(xs):
    m = mean(xs)
    acc = 0.0
    for x in xs:
        acc += (x - m) ** 2
    return math.sqrt(acc / len(xs))


# ---------- §2 LAPO ----------

def eligible_mask(turns, kinds, no_answer_all):
    has_answer = bool(turns) and turns[-1]["kind"] == "answer"
    out = []
    for t, turn in enumerate(turns):
        if has_answer and t == len(turns) - 1:
            out.append(False)
        elif turn["kind"] not in kinds:
            out.append(False)
        elif not has_answer and no_answer_all:
            out.append(True)
        else:
            out.append(turn.get("action_tokens", 0) > 0 and turn.get("observation_tokens", 0) > 0)
    return out


def lapo(members, args):
    kinds = [k for k in args.eligible_kinds.split(",") if k]
    pairs = []  # (member index, turn index, delta)
    for i, rec in enumerate(members):
        mask = eligible_mask(rec["turns"], kinds, args.no_answer_empty_segments_eligible)
        for t, turn in enumerate(rec["turns"]):
            if mask[t] and turn.get("delta") is not None:
                d = float(turn["delta"])
                if math.isnan(d) or math.isinf(d):
                    d = 0.0
                pairs.append((i, t, d))
    info = {}
    if pairs:
        big = sorted(abs(d) for _, _, d in pairs if abs(d) > args.eps_ig)
        if big:
            n = len(big)
            med = big[n // 2] if n % 2 == 1 else (big[n // 2 - 1] + big[n // 2]) / 2
            tau = med + args.eps_ig
        else:
            tau = args.eps_ig
        zs = [math.tanh(d / tau) for _, _, d in pairs]
        mz, sz = mean(zs), pstd(zs)
        for (i, t, d), z in zip(pairs, zs):
            zt = (z - mz) / (sz + args.eps_z)
            gate = 1 if (d > 0 and zt > 0) or (d < 0 and zt < 0) else 0
            proc = zt if (args.no_gate or gate) else 0.0
            info[(i, t)] = (d, z, zt, gate, proc)
    return info


# ---------- §3 AttnSR ----------

def znorm(xs):
    if all(x == xs[0] for x in xs):
        return [0.0] * len(xs)
    m, s = mean(xs), pstd(xs)
    if s == 0:
        return [0.0] * len(xs)
    return [(x - m) / s for x in xs]


def layer_allocation(aa, ao, K, args):
    G = lambda j, k: 0.5 * aa[j][k] + 0.5 * ao[j][k]
    a = [0.0] * K
    a[K - 1] = 1.0
    for k in range(K - 2, -1, -1):
        a[k] = args.rho * sum(a[j] * G(j, k) for j in range(k + 1, K))
    # steps k = 1..K-1 in 1-based terms; d_k = K - k
    la = znorm([math.log(max(a[k], args.eps)) for k in range(K - 1)])
    ld = znorm([float(K - (k + 1)) for k in range(K - 1)])
    z = [la[k] + args.eta * ld[k] for k in range(K - 1)]
    ex = [math.exp(v / args.temperature) for v in z]
    tot = sum(ex)
    p = [v / tot for v in ex]
    mass = sum(aa[K - 1][k] + ao[K - 1][k] for k in range(K - 1))
    return p, mass


def attnsr_member(rec, R, baseline, args):
    K = len(rec["turns"])
    if K == 1:
        return None, 0.0, 0.0, 0.0
    per, masses = [], []
    for layer in rec["attention"]:
        p, m = layer_allocation(layer["aa"], layer["ao"], K, args)
        per.append(p)
        masses.append(m)
    L = len(per)
    q = [math.exp(sum(math.log(max(per[l][k], args.eps)) for l in range(L)) / L) for k in range(K - 1)]
    qs = sum(q)
    p = [v / qs for v in q]
    focus = sum(0.0 if m == 0 else min(1.0, m / args.m_star) for m in masses) / L
    tv = [0.5 * sum(abs(per[l][k] - p[k]) for k in range(K - 1)) for l in range(L)]
    consensus = 1 - sum(tv) / L
    return p, focus, consensus, focus * consensus


# ---------- output (docs/offline.md) ----------

def finalize(members, partial, args, ema, out):
    rewards = [reward_of(m) for m in members]
    mu, sd = mean(rewards), pstd(rewards)
    aout = [(r - mu) / (sd + args.eps_r) for r in rewards]
    if args.method == "lapo":
        info = lapo(members, args)
    else:
        M = mean(rewards)
        if ema["t"] == 0:
            ema["v"] = M
        else:
            ema["v"] = args.ema_delta * ema["v"] + (1 - args.ema_delta) * M
        ema["t"] += 1
    for i, rec in enumerate(members):
        turns = rec["turns"]
        o = {"trajectory_id": rec["trajectory_id"], "prompt_id": rec["prompt_id"], "partial": partial,
             "reward": rewards[i], "outcome_advantage": aout[i]}
        turn_adv = []
        token_rewards = None
        if args.method == "lapo":
            ts = []
            for t in range(len(turns)):
                if (i, t) in info:
                    d, z, zt, g, proc = info[(i, t)]
                    adv = aout[i] + args.lam * proc
                    ts.append({"eligible": True, "delta": d, "z": z, "z_norm": zt, "gate": g,
                               "process_advantage": proc, "advantage": adv})
                else:
                    adv = aout[i]
                    ts.append({"eligible": False, "delta": None, "z": None, "z_norm": None, "gate": 0,
                               "process_advantage": 0.0, "advantage": adv})
                turn_adv.append(adv)
            o["turns"] = ts
        else:
            K = len(turns)
            p, F, Q, C = attnsr_member(rec, rewards[i], ema["v"], args)
            B = args.beta * C * (rewards[i] - ema["v"])
            s = [B * pk for pk in p] if p is not None else None
            ts = [{"p": (p[k] if p is not None and k < K - 1 else None),
                   "step_reward": (s[k] if s is not None and k < K - 1 else None),
                   "weight": None, "advantage": None} for k in range(K)]
            if args.attnsr_output == "grpo":
                omega = [((1 - C) + C * (K - 1) * p[k]) if (p is not None and k < K - 1) else 1.0
                         for k in range(K)]
                token_w = []
                for k in range(K):
                    token_w += [omega[k]] * turns[k].get("action_tokens", 0)
                mw = mean(token_w) if token_w else mean(omega)
                for k in range(K):
                    wt = omega[k] / mw
                    ts[k]["weight"] = wt
                    ts[k]["advantage"] = aout[i] * ((1 - args.alpha) + args.alpha * wt)
                    turn_adv.append(ts[k]["advantage"])
            else:
                # token rewards: index of each step's last assistant token
                pos = rec.get("prompt_tokens", 0)
                first = []
                for turn in turns:
                    first.append(pos)
                    pos += turn.get("action_tokens", 0) + turn.get("observation_tokens", 0)
                token_rewards = [0.0] * pos

                def put(step, v):
                    for j in range(step, -1, -1):
                        n = turns[j].get("action_tokens", 0)
                        if n > 0:
                            token_rewards[first[j] + n - 1] += v
                            return
                    for j in range(step + 1, K):
                        if turns[j].get("action_tokens", 0) > 0:
                            token_rewards[first[j]] += v
                            return
                if s is not None:
                    for k in range(K - 1):
                        put(k, s[k])
                put(K - 1, rewards[i])
            o["turns"] = ts
            o["attnsr"] = {"confidence": C, "focus": F, "consensus": Q, "baseline": ema["v"], "budget": B}
        if args.tokens:
            adv_arr = [0.0] * rec.get("prompt_tokens", 0)
            mask = [0] * rec.get("prompt_tokens", 0)
            for t, turn in enumerate(turns):
                n, ob = turn.get("action_tokens", 0), turn.get("observation_tokens", 0)
                adv_arr += [turn_adv[t] if turn_adv else 0.0] * n + [0.0] * ob
                mask += [1] * n + [0] * ob
            ppo = args.method == "attnsr" and args.attnsr_output == "ppo"
            o["token_advantages"] = None if ppo else adv_arr
            o["loss_mask"] = mask
            if ppo:
                o["token_rewards"] = token_rewards
        out.write(json.dumps(o) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="lapo")
    ap.add_argument("--no-gate", action="store_true")
    ap.add_argument("--lambda", dest="lam", type=float, default=0.5)
    ap.add_argument("--eps-ig", type=float, default=1e-6)
    ap.add_argument("--eps-z", type=float, default=1e-6)
    ap.add_argument("--eps-r", type=float, default=1e-6)
    ap.add_argument("--eligible-kinds", default="search")
    ap.add_argument("--no-answer-empty-segments-eligible", action="store_true")
    ap.add_argument("--attnsr-output", default="grpo")
    ap.add_argument("--beta", type=float, default=0.25)
    ap.add_argument("--alpha", type=float, default=0.25)
    ap.add_argument("--rho", type=float, default=0.9)
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--m-star", type=float, default=0.5)
    ap.add_argument("--ema-delta", type=float, default=0.99)
    ap.add_argument("--tokens", action="store_true")
    args = ap.parse_args()

    groups = {}   # prompt_id -> {"size": n, "members": [...]}, insertion order = first appearance
    done = set()
    seen = set()
    ema = {"v": 0.0, "t": 0}
    out = sys.stdout
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        tid, pid = rec["trajectory_id"], rec["prompt_id"]
        if tid in seen:
            sys.stderr.write("line %d: repeated %s\n" % (n, tid))
            continue
        if pid in done:
            seen.add(tid)
            sys.stderr.write("line %d: late %s\n" % (n, tid))
            continue
        g = groups.setdefault(pid, {"size": rec["group_size"], "members": []})
        if rec["group_size"] != g["size"]:
            sys.stderr.write("line %d: group size mismatch %s\n" % (n, tid))
            continue
        seen.add(tid)
        g["members"].append(rec)
        if len(g["members"]) == g["size"]:
            finalize(g["members"], False, args, ema, out)
            del groups[pid]
            done.add(pid)
    for pid, g in list(groups.items()):
        finalize(g["members"], True, args, ema, out)


if __name__ == "__main__":
    main()
