"""The reference trainer's losses (docs/trainers.md, docs/learn.md "The trainer").

Both losses clip the importance ratio against the policy before this update (`old`: the
trainer's own log-probabilities, computed once per batch before its optimizer steps) and
weight each token by a truncated importance weight `min(C, exp(old − log μ))` against the
behaviour policy μ, whose log-probabilities the rollout workers recorded
(`rollout_logprobs`). The first optimizer step of a batch has ratio 1 everywhere; the clip
bounds how far further steps (`--epochs`) move a token.

- `pg`: the per-token advantages creditflow computed (LAPO, GRPO, AttnSR's GRPO variant).
- `ppo`: the per-token rewards of AttnSR's `ppo` output, turned into advantages by GAE with a
  critic (a value head) over the policy tokens; the critic is trained on the GAE returns.

A batch that lacks the array its loss needs is an error (MissingField), never zeros.
"""

import torch

from .. import policy as P
from ..batch import to_torch

__all__ = ["MissingField", "check_fields", "Batch", "Critic", "gae", "rewards_at_end", "policy_loss", "value_loss", "FIELD"]

FIELD = {"pg": "advantages", "ppo": "token_rewards"}


class MissingField(ValueError):
    """A sample lacks the per-token array the loss needs."""


def check_fields(batch, loss):
    """Raises MissingField naming the field and the first sample without it."""
    f = FIELD[loss]
    for s in batch:
        if s.get(f) is None:
            raise MissingField("sample %s (method %s, output %s) has no %s: the %s loss needs them (docs/learn.md)"
                               % (s.get("trajectory_id"), s.get("method"), s.get("output"), f, loss))


class Batch:
    """One batch's tensors, shifted to the positions that predict each token (docs/trainers.md:
    `logits[:, :-1]` against `input_ids[:, 1:]`)."""

    def __init__(self, batch):
        b = to_torch(batch, pad_id=P.PAD, reuse=False)
        self.ids = b["input_ids"]
        self.temps = torch.tensor([s.get("temperature") or 1.0 for s in batch], dtype=torch.float32)
        self.mask = b["loss_mask"][:, 1:] * b["attention_mask"][:, 1:].float()
        self.adv = b["advantages"][:, 1:]
        self.rewards = b["token_rewards"][:, 1:]
        self.lp_mu = b["rollout_logprobs"][:, 1:]
        has_mu = torch.tensor([s.get("rollout_logprobs") is not None for s in batch])
        self.has_mu = has_mu[:, None].float().expand_as(self.mask)
        self.n = self.mask.sum().clamp(min=1)

    def mean(self, x):
        """Token mean over the policy tokens."""
        return (x * self.mask).sum() / self.n


def logprobs_entropy(model, b):
    """log π of each token and the entropy of π at each position, logits divided by the
    sample's temperature."""
    logits = model(b.ids[:, :-1]) / b.temps.view(-1, 1, 1)
    logsm = torch.log_softmax(logits.float(), -1)
    logp = logsm.gather(-1, b.ids[:, 1:, None]).squeeze(-1)
    ent = -(logsm.exp() * logsm).sum(-1)
    return logp, ent


def policy_loss(model, b, old, adv, clip, is_cap):
    """The clipped objective with the truncated importance weight; returns the loss and the
    diagnostics of docs/learn.md: clip fraction, entropy, and against μ the approximate KL
    (k3: mean of r − 1 − log r, r = π_old/μ) and the share of truncated weights."""
    logp, ent = logprobs_entropy(model, b)
    ratio = torch.exp(logp - old)
    log_w = (old - b.lp_mu) * b.has_mu  # 0 (weight 1) for samples without rollout log-probs
    w = torch.exp(log_w).clamp(max=is_cap)
    obj = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    loss = -b.mean(w * obj)
    with torch.no_grad():
        clipped = b.mean(((ratio - 1).abs() > clip).float())
        lw = log_w.double()  # w − 1 − log w in float64 (expm1): float32 rounding makes it negative near w = 1
        kl = float(((torch.expm1(lw) - lw) * b.mask.double()).sum() / b.n.double())
        truncated = b.mean((torch.exp(log_w) > is_cap).float())
        entropy = b.mean(ent)
    return loss, {"clip_fraction": float(clipped), "approx_kl": kl, "is_truncated": float(truncated),
                  "entropy": float(entropy)}


class Critic(torch.nn.Module):
    """A value head on a copy of the starting policy's network: its output layer is replaced by
    one linear unit, initialized to 0 (every value starts at 0). values(ids) [B, N-1] is the
    value of the state before each token 1..N-1 (the same positions as the log-probs)."""

    def __init__(self, init_folder):
        super().__init__()
        self.net = P.load(init_folder)
        head = torch.nn.Linear(self.net.c["hidden_size"], 1, bias=True)
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
        self.net.lm_head = head

    def values(self, ids):
        return self.net(ids[:, :-1]).squeeze(-1)


def gae(rewards, values, mask, gamma=1.0, lam=0.95):
    """Advantages and returns of GAE(γ, λ) over each row's policy tokens (mask 1), in order:
    the observation tokens between two actions are the environment's transition, not steps.
    δ_j = r_j + γ·V_{j+1} − V_j over the row's policy tokens j (V after the last one is 0),
    A_j = δ_j + γλ·A_{j+1}, returns = A + V. Zero off the policy tokens."""
    adv = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        idx = torch.nonzero(mask[i] > 0).squeeze(-1)
        if idx.numel() == 0:
            continue
        r, v = rewards[i, idx], values[i, idx]
        v_next = torch.cat((v[1:], v.new_zeros(1)))
        delta = r + gamma * v_next - v
        a, run = torch.zeros_like(delta), 0.0
        for j in range(delta.numel() - 1, -1, -1):
            run = float(delta[j]) + gamma * lam * run
            a[j] = run
        adv[i, idx] = a
    return adv, (adv + values) * mask


def rewards_at_end(rewards, mask):
    """Each row's token rewards summed onto its last policy token (mask 1), 0 elsewhere: AttnSR's
    step rewards moved onto the terminal reward, so the episode is paid `R + β·C·(R − R̄)` where
    PPO's terminal reward is (the arm `attnsr+…+terminal`, docs/learn.md). A row without policy
    tokens keeps its (zero) rewards."""
    on = mask > 0
    last = (on * torch.arange(1, mask.shape[1] + 1)).argmax(-1, keepdim=True)  # a row without: 0
    total = (rewards * on).sum(-1, keepdim=True)  # 0 for a row without policy tokens
    return torch.zeros_like(rewards).scatter_(1, last, total)


def value_loss(critic, b, returns):
    """Half the mean squared error of the values against the GAE returns, over policy tokens."""
    v = critic.values(b.ids)
    return 0.5 * b.mean((v - returns) ** 2)
