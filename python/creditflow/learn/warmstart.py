"""The starting checkpoint of the training loop (docs/learn.md, "The starting policy").

usage: python3 -m creditflow.learn.warmstart --init scorer/cpumodel/tiny --out DIR [--worlds W1,W2] [--steps N] [--seed S]

Behaviour cloning from a checkpoint (the built-in tiny model for the shared start of searchqa
and household; that start for widesearch's own) on demonstrations of the worlds named by
--worlds (creditflow.envs), mixed in equal parts: every query (place) is picked uniformly at random among the well-formed
ones, and the answer copies the evidence when a turn revealed it (a random name otherwise).
The loss is the cross-entropy of the action tokens only. The result writes well-formed actions,
answers from the evidence it has seen, and picks its queries at random: it succeeds in a
minority of episodes, and what it has to learn by reinforcement is where the evidence is kept. Float32, one thread, fixed seed: the same arguments write the same bytes.
"""

import argparse
import json
import os
import random
import shutil
import sys
import time

import torch

from .. import envs as E
from .. import policy as P
from . import rollout


def demonstrations(env, seeds, rng, p_right):
    """(ids, action_mask) of expert episodes."""
    out = []
    for s in seeds:
        ep = env.reset(s)
        ids = P.encode(ep.prompt)
        mask = [0] * len(ids)
        while env.phase(ep) != "done":
            act = env.expert_action(ep, rng, p_right)
            obs = env.step(ep, act)
            a, o = P.encode(act), P.encode(obs)
            ids += a + o
            mask += [1] * len(a) + [0] * len(o)
        out.append((ids, mask))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="checkpoint folder to start from (the built-in tiny model)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--eval-episodes", type=int, default=200)
    ap.add_argument("--worlds", default="searchqa,household",
                    help="comma-separated worlds whose demonstrations are mixed (creditflow.envs)")
    ap.add_argument("--p-right", type=float, default=0.0,
                    help="demonstrations pick the right query (place) with this probability, else uniformly")
    a = ap.parse_args(argv)
    rollout.setup_torch()
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    worlds = [E.make_env(n) for n in a.worlds.split(",")]
    data = []
    for k, env in enumerate(worlds):
        data += demonstrations(env, range(10_000_000 * (k + 1), 10_000_000 * (k + 1) + a.steps * a.batch // len(worlds)), rng,
                               a.p_right)
    rng.shuffle(data)
    model = P.load(a.init)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    t0 = time.time()
    for step in range(a.steps):
        chunk = data[step * a.batch:(step + 1) * a.batch]
        n = max(len(x[0]) for x in chunk)
        ids = torch.full((len(chunk), n), P.PAD, dtype=torch.long)
        m = torch.zeros(len(chunk), n)
        for r, (x, mk) in enumerate(chunk):
            ids[r, :len(x)] = torch.tensor(x)
            m[r, :len(mk)] = torch.tensor(mk, dtype=torch.float32)
        lp = P.token_logprobs(model, ids, 1.0)
        loss = -(lp * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == a.steps - 1:
            print("step %4d  action loss %.4f  %.0fs" % (step, loss.item(), time.time() - t0), flush=True)
    extra = {}
    tok = os.path.join(a.init, "tokenizer.json")
    if os.path.exists(tok):
        with open(tok) as f:
            extra["tokenizer.json"] = f.read()
    P.save(model, a.out, extra)
    report = {"steps": a.steps, "batch": a.batch, "seconds": round(time.time() - t0, 1)}
    for env in worlds:
        gen = torch.Generator().manual_seed(a.seed)
        seeds = list(range(2_000_000_000, 2_000_000_000 + a.eval_episodes))
        succ, reward, found = rollout.evaluate(model, env, seeds, generator=gen)
        report[env.name] = {"success": round(succ, 3), "found": round(found, 3)}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
