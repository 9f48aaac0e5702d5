"""Row statistics, a member of Model (Model.scores): LAPO row scores (score_rows; prefix
sharing planned in rowplan.py, run in rowrun.py, walk or packed), the row-by-row baseline it
is tested and measured against, and the entropy and kl statistics of rows
(score_rows_statistic); the row validation (prepare) and the log-probabilities (Head) they
and the padded baseline share."""

import math

import torch
import torch.nn.functional as F

from . import rowplan
from .config import InputError


class Usage:
    def __init__(self):
        self.tokens_forwarded = 0
        self.tokens_row_by_row = 0
        self.truncations = 0
        self.packs = 0  # model calls of tree packing (0 under walk)
        self.max_pack_tokens = 0  # tokens of the largest of them


def temperatures(rows):
    """The temperature of every row: its optional 4th element (None or absent: 1), a finite
    number > 0."""
    out = []
    for i, row in enumerate(rows):
        t = row[3] if len(row) > 3 and row[3] is not None else 1.0
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise InputError(f"row {i}: temperature {t!r} must be a finite number > 0 (leave it out for 1)")
        out.append(float(t))
    return out


def prepare(cfg, rows):
    """rows: [(context, target, (a, b)[, temperature])] → [(seq, ctx_len, a, b)], Usage:
    validated against the model's vocabulary and context, contexts cut from the left to fit."""
    u = Usage()
    V, MC = cfg.vocab, cfg.max_context
    out = []
    for i, row in enumerate(rows):
        ctx, tgt, span = row[0], row[1], row[2]
        a, b = span
        if a < 0 or b > len(tgt) or a >= b:
            raise InputError(f"row {i}: span [{a}, {b}) is not a non-empty range inside the "
                             f"target ({len(tgt)} tokens)")
        if len(tgt) > MC:
            raise InputError(f"row {i}: target has {len(tgt)} tokens, more than the model's context ({MC})")
        for what, seq in (("context", ctx), ("target", tgt)):
            for j, t in enumerate(seq):
                if not 0 <= t < V:
                    raise InputError(f"row {i}: {what} token {j} is {t}, outside the vocabulary [0, {V})")
        over = len(ctx) + len(tgt) - MC
        if over > 0:
            ctx = ctx[over:]
            u.truncations += 1
        if len(ctx) + a == 0:
            raise InputError(f"row {i}: the first scored token has no preceding token to condition "
                             "on (empty context and span starting at 0)")
        seq = list(ctx) + list(tgt)
        out.append((seq, len(ctx), a, b))
        u.tokens_row_by_row += len(seq)
    return out, u


class Head:
    """Log-probabilities from final-norm hidden states: the LM head in float32 whatever the
    model's dtype, softmax in float64."""

    def __init__(self, net):
        self.net = net
        self._head32 = self._head32_of = None

    def head32(self):
        """The LM head in float32: the head itself in float32, else a float32 copy made once
        (vocab x hidden x 4 bytes: 2.2 GB at Qwen2.5-7B's shape)."""
        lm_head = self.net.lm_head
        if lm_head.dtype == torch.float32:
            return lm_head
        if self._head32_of is not lm_head:
            self._head32, self._head32_of = lm_head.float(), lm_head
        return self._head32

    def log_probs(self, hidden, toks, temps=None):
        """log p(toks[i] | hidden[i]) = log_softmax(logits / temps[i])[toks[i]] with float32
        logits (head32) divided by the temperature in float64 (exact for 1) and a float64
        log-sum-exp, in blocks of rows that hold at most 2^27 logits. temps: float64 tensor,
        one per row, or None for 1."""
        head = self.head32()
        step = max(1, (1 << 27) // self.net.cfg.vocab)
        out = []
        for s in range(0, hidden.shape[0], step):
            logits = F.linear(hidden[s:s + step].float(), head).double()
            if temps is not None:
                logits = logits / temps[s:s + step, None]
            lse = torch.logsumexp(logits, -1)
            out.append(logits.gather(1, toks[s:s + step, None])[:, 0] - lse)
        return out[0] if len(out) == 1 else torch.cat(out)


class RowScorer:
    """The row statistics of a model (LAPO scores with prefix sharing, entropy, kl) from its
    forward passes (forward.Forward), log-probabilities (Head) and plan runner (rowrun)."""

    def __init__(self, forward, head, runner):
        self.forward, self.head, self.runner = forward, head, runner
        self.cfg, self.device = forward.cfg, forward.device
        # How score_rows shares prefixes (see there). The walk does the least arithmetic and
        # is bitwise equal to row-by-row scoring on CPU; tree packing makes fewer, larger
        # calls of at most pack_tokens tokens, which keeps an accelerator busy.
        self.packing = "tree" if self.device.type == "cuda" else "walk"
        self.pack_tokens = 4096

    # ----- LAPO rows ----------------------------------------------------------------

    def plan_rows(self, rows, packing=None, pack_tokens=None):
        """Everything of score_rows that needs no model (validation, the radix tree, the
        calls and their indices; rowplan.py): run it outside the model lock, then
        score_plan inside."""
        prep, u = prepare(self.cfg, rows)
        temps = temperatures(rows)
        mode = packing or self.packing
        if mode not in ("walk", "tree"):
            raise ValueError(f"packing {mode!r} is not supported (want walk or tree)")
        if not prep:
            return prep, u, None
        root = rowplan.build_tree(prep)
        if mode == "tree":
            plan = rowplan.plan_tree(prep, root, temps, pack_tokens or self.pack_tokens)
        else:
            plan = rowplan.plan_walk(prep, root, temps)
        u.tokens_forwarded, u.packs, u.max_pack_tokens = plan.tokens_forwarded, plan.packs, plan.max_pack_tokens
        return prep, u, plan

    def score_plan(self, planned):
        """Scores a plan_rows result on the model: (scores, Usage) as score_rows."""
        prep, u, plan = planned
        if plan is None:
            return [], u
        lp = [[0.0] * (b - a) for (_, _, a, b) in prep]
        for (i, k), v in zip(plan.outs, self.runner.run_plan(prep, plan)):
            lp[i][k] = v
        return [math.fsum(v) / len(v) for v in lp], u

    @torch.no_grad()
    def score_rows(self, rows, packing=None, pack_tokens=None):
        """S for every row (docs/method.md §2.1): the mean natural-log probability of target[a:b] given
        context and target[:k], under log_softmax(logits / temperature). rows: [(context ids,
        target ids, (a, b)[, temperature])], temperature > 0, absent or None for 1. Returns
        (scores as floats, Usage). A context longer than max_context - len(target) keeps
        its rightmost tokens (counted in Usage.truncations).

        The rows are merged into a radix tree and each distinct prefix is forwarded once
        (rowplan.py): packing "walk" forwards the tree depth-first, one edge at a time on its
        parent's key/value cache (the least arithmetic, many small calls; the default on
        CPU); "tree" packs whole subtrees (trajectories, usually) into calls of at most
        pack_tokens tokens (default self.pack_tokens) with tree positions and an ancestor
        mask, splitting larger subtrees and edges (few larger calls, for accelerators where
        call overhead dominates; the default on CUDA). Both forward the same tokens; Usage
        counts the packs and the largest one's tokens."""
        return self.score_plan(self.plan_rows(rows, packing, pack_tokens))

    @torch.no_grad()
    def score_rows_naive(self, rows):
        """Scores every row on its own from an empty cache (no prefix sharing): the
        baseline score_rows is tested and measured against."""
        prep, u = prepare(self.cfg, rows)
        temps = temperatures(rows)
        out = []
        for (seq, cl, a, b), temp in zip(prep, temps):
            cache = self.forward.cache(len(seq), self.cfg.layers)
            toks = torch.tensor(seq, dtype=torch.long, device=self.device)
            pos = torch.arange(cl + a - 1, cl + b - 1, device=self.device)
            hid = self.forward.cached(cache, toks, out_pos=pos)
            tt = torch.full((b - a,), temp, dtype=torch.float64, device=self.device)
            out.append(math.fsum(self.head.log_probs(hid, toks[pos + 1], tt).tolist()) / (b - a))
            u.tokens_forwarded += len(seq)
        return out, u

    # ----- entropy and kl statistics -------------------------------------------------

    def _span_log_dists(self, seq, cl, a, b, temp):
        """The log-distributions (float64 [b - a, vocab]) that predict target[a:b] of one
        prepared row: the whole sequence forwarded from an empty cache, float32 logits of the
        float32 LM head divided by the temperature in float64, log-softmax in float64."""
        cache = self.forward.cache(len(seq), self.cfg.layers)
        toks = torch.tensor(seq, dtype=torch.long, device=self.device)
        pos = torch.arange(cl + a - 1, cl + b - 1, device=self.device)
        hid = self.forward.cached(cache, toks, out_pos=pos)
        logits = F.linear(hid.float(), self.head.head32()).double() / temp
        return torch.log_softmax(logits, -1)

    @torch.no_grad()
    def score_rows_statistic(self, rows, stat):
        """The statistic stat of every row (docs/offline.md, docs/method.md §2.4):
        "logprob" is score_rows; "entropy" the mean over k in [a, b) of the entropy (nats)
        of p(. | context, target[:k]) at the row's temperature; "kl" the mean of
        KL(p(. | context, target[:k]) || p(. | reference, target[:k])), the reference being
        every row's fifth element. Rows are forwarded one by one (no prefix sharing), each
        context cut from the left on its own when too long. Returns (scores, Usage)."""
        if stat == "logprob":
            return self.score_rows(rows)
        if stat not in ("entropy", "kl"):
            raise InputError(f"statistic {stat!r}: use logprob, entropy or kl")
        prep, u = prepare(self.cfg, rows)
        temps = temperatures(rows)
        refs = None
        if stat == "kl":
            for i, row in enumerate(rows):
                if len(row) < 5 or row[4] is None:
                    raise InputError(f"row {i}: the kl statistic needs a reference context")
            refs, ru = prepare(self.cfg, [(row[4], row[1], row[2]) for row in rows])
            u.truncations += ru.truncations
            u.tokens_row_by_row += ru.tokens_row_by_row
        out = []
        for i, ((seq, cl, a, b), temp) in enumerate(zip(prep, temps)):
            lp = self._span_log_dists(seq, cl, a, b, temp)
            u.tokens_forwarded += len(seq)
            p = lp.exp()
            if stat == "entropy":
                per = -torch.where(p > 0, p * lp, torch.zeros_like(p)).sum(-1)
            else:
                rseq, rcl, ra, rb = refs[i]
                lq = self._span_log_dists(rseq, rcl, ra, rb, temp)
                u.tokens_forwarded += len(rseq)
                per = torch.where(p > 0, p * (lp - lq), torch.zeros_like(p)).sum(-1)
            out.append(math.fsum(per.tolist()) / (b - a))
        return out, u
