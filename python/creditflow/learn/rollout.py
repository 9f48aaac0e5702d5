"""Playing episodes with a policy, in batches, and turning them into trajectories."""

import torch

from .. import envs as _envs
from .. import policy as P
from ..trajectory import build_trajectory, byte_tokenizer

__all__ = ["play", "to_trajectory", "evaluate", "setup_torch"]


def setup_torch(threads=1):
    """One thread, deterministic kernels: the same seed gives the same episodes."""
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1) if hasattr(torch, "set_num_interop_threads") else None


def play(model, env, seeds, temperature=1.0, generator=None):
    """Plays one episode per seed, all turns batched across episodes. Returns a list of
    (episode, turns) where turns are (kind, action_ids, action_logprobs, observation_ids)."""
    eps = [env.reset(s) for s in seeds]
    ctx = [P.encode(e.prompt) for e in eps]
    turns = [[] for _ in eps]
    while True:
        live = [i for i, e in enumerate(eps) if env.phase(e) != "done"]
        if not live:
            break
        acts = P.sample_actions(model, [ctx[i] for i in live], [env.stop_for(eps[i]) for i in live],
                                max_tokens=env.max_action_bytes, temperature=temperature, generator=generator)
        for i, (ids, lps) in zip(live, acts):
            kind = env.kind(eps[i])
            obs = env.step(eps[i], P.decode(ids))
            obs_ids = P.encode(obs)
            turns[i].append((kind, ids, lps, obs_ids))
            ctx[i] = ctx[i] + ids + obs_ids
    return list(zip(eps, turns))


def to_trajectory(env, episode, turns, *, trajectory_id, prompt_id, group_size, sample_index, policy_version,
                  temperature, source=None, gold=None):
    """The trajectory record of a played episode (RolloutPublisher.publish takes it). The
    search worlds carry their gold answer (LAPO's gold target, byte tokens; `gold` in place of
    the episode's: the label-noise arm's); every world's trajectory carries the outcome reward."""
    lps = [lp for t in turns for lp in t[2]]
    gold = [gold or episode.gold] if env.info_kind == "search" else []
    return build_trajectory(
        trajectory_id=trajectory_id, prompt_id=prompt_id, group_size=group_size, sample_index=sample_index,
        prompt_ids=P.encode(episode.prompt),
        turns=[(k, ids, obs if obs else None) for k, ids, _, obs in turns],
        policy_version=policy_version, reward=episode.reward, pred_answer=episode.answer or "",
        gold_answers=gold, tokenize=byte_tokenizer if gold else None,
        rollout_logprobs=lps, temperature=temperature, source=source or env.name)


def evaluate(model, env, seeds, generator=None, temperature=1.0, batch=128):
    """Held-out evaluation on fixed seeds with fixed decoding (sampling at `temperature` from
    `generator`, seeded by the caller; 0: greedy). Returns (success_rate, reward_mean,
    found_rate): found_rate is the share of episodes in which a turn revealed the evidence."""
    wins = found = 0
    total = 0.0
    for a in range(0, len(seeds), batch):
        for ep, _ in play(model, env, seeds[a:a + batch], temperature=temperature, generator=generator):
            wins += ep.correct  # the truth: evaluation has no judge
            found += bool(ep.key_turns)
            total += ep.reward
    n = max(1, len(seeds))
    return wins / n, total / n, found / n
