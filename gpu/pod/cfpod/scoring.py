"""LAPO row scores: the radix-tree prefix sharing of Model.score_rows (walk or packed),
and the row-by-row baseline it is tested and measured against."""

import math

import torch
import torch.nn.functional as F

from .cache import Cache
from .config import InputError


class Usage:
    def __init__(self):
        self.tokens_forwarded = 0
        self.tokens_row_by_row = 0
        self.truncations = 0


class _Node:
    __slots__ = ("start", "end", "children", "outs", "ref")

    def __init__(self, start, end):
        self.start, self.end = start, end
        self.children = []
        self.outs = []  # (row, k, position of the scored token)



class _RowScoring:
    """The row-scoring methods of Model."""

    def _log_probs(self, hidden, toks, temps=None):
        """log p(toks[i] | hidden[i]) = log_softmax(logits / temps[i])[toks[i]] with float32
        logits divided by the temperature in float64 (exact for 1) and a float64
        log-sum-exp. temps: float64 tensor, one per row, or None for 1."""
        logits = F.linear(hidden, self.lm_head).float().double()
        if temps is not None:
            logits = logits / temps[:, None]
        lse = torch.logsumexp(logits, -1)
        return logits.gather(1, toks[:, None])[:, 0] - lse

    @staticmethod
    def _temperatures(rows):
        """The temperature of every row: its optional 4th element (None or absent: 1), a
        finite number > 0."""
        out = []
        for i, row in enumerate(rows):
            t = row[3] if len(row) > 3 and row[3] is not None else 1.0
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                raise InputError(f"row {i}: temperature {t!r} must be a finite number > 0 (leave it out for 1)")
            out.append(float(t))
        return out

    # ----- LAPO rows ----------------------------------------------------------------

    def _prepare(self, rows):
        """rows: [(context, target, (a, b)[, temperature])] → [(seq, ctx_len, a, b)], Usage."""
        u = Usage()
        V, MC = self.cfg.vocab, self.cfg.max_context
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

    def _tree(self, prep, idx, depth):
        """Radix tree over the sequences prep[idx], which all share seq[:depth]. Every row of
        a node holds the node's tokens [start, end)."""
        seqs = [prep[i][0] for i in idx]
        first = seqs[0]
        if len(seqs) == 1:
            lcp = len(first)
        else:
            end = min(len(s) for s in seqs)
            lcp = depth
            while lcp < end:
                t = first[lcp]
                if any(s[lcp] != t for s in seqs):
                    break
                lcp += 1
        node = _Node(depth, lcp)
        node.ref = idx[0]
        for i in idx:
            seq, cl, a, b = prep[i]
            lo, hi = max(depth, cl + a - 1), min(lcp, cl + b - 1)
            for p in range(lo, hi):
                node.outs.append((i, p - (cl + a - 1), p, seq[p + 1]))
        groups = {}
        for i in idx:
            s = prep[i][0]
            if len(s) > lcp:
                groups.setdefault(s[lcp], []).append(i)
        node.children = [self._tree(prep, g, lcp) for g in groups.values()]
        return node

    @torch.no_grad()
    def score_rows(self, rows, packing=None, pack_tokens=None):
        """S for every row (docs/method.md §2.1): the mean natural-log probability of target[a:b] given
        context and target[:k], under log_softmax(logits / temperature). rows: [(context ids,
        target ids, (a, b)[, temperature])], temperature > 0, absent or None for 1. Returns
        (scores as floats, Usage). A context longer than max_context - len(target) keeps
        its rightmost tokens (counted in Usage.truncations).

        The rows are merged into a radix tree and each distinct prefix is forwarded once:
        packing "walk" forwards the tree depth-first, one edge at a time on its parent's
        key/value cache (the least arithmetic, many small calls; the default); "tree" packs
        whole subtrees (trajectories, usually) up to pack_tokens tokens (default
        self.pack_tokens) into one sequence with tree positions and an ancestor mask (few
        larger calls, for accelerators where call overhead dominates). Both forward the same tokens; a pack's attention costs
        O(pack_tokens) per token, so packs stay a few thousand tokens long."""
        prep, u = self._prepare(rows)
        temps = self._temperatures(rows)
        if not prep:
            return [], u
        root = self._tree(prep, list(range(len(prep))), 0)
        lp = [[0.0] * (b - a) for (_, _, a, b) in prep]
        mode = packing or self.packing
        # The tree shares prefixes whatever the rows' temperatures: the key/value cache and
        # the hidden states do not depend on it; each scored token (an "out", one per row)
        # gets its own row's temperature in _fill.
        if mode == "tree":
            self._score_tree(prep, root, lp, u, pack_tokens or self.pack_tokens, temps)
        elif mode == "walk":
            self._score_walk(prep, root, lp, u, temps)
        else:
            raise ValueError(f"packing {mode!r} is not supported (want walk or tree)")
        return [math.fsum(v) / len(v) for v in lp], u

    def _fill(self, lp, outs, hid, where, temps):
        """log-probs of the scored tokens outs [(row, k, position, token)] from hidden states
        hid, whose row for an out is where[out], at each row's temperature temps[row]."""
        sel = torch.tensor(where, dtype=torch.long, device=self.device)
        tg = torch.tensor([o[3] for o in outs], dtype=torch.long, device=self.device)
        tt = torch.tensor([temps[o[0]] for o in outs], dtype=torch.float64, device=self.device)
        for (i, k, _, _), v in zip(outs, self._log_probs(hid[sel], tg, tt).tolist()):
            lp[i][k] = v

    def _score_walk(self, prep, root, lp, u, temps):
        cache = Cache(self, max(len(p[0]) for p in prep), self.cfg.layers)
        stack = [root]
        while stack:  # depth-first; a node's cache prefix is exactly its parent's path
            node = stack.pop()
            cache.n = node.start
            T = node.end - node.start
            if T > 0 and (node.outs or node.children):
                toks = torch.tensor(prep[node.ref][0][node.start:node.end], dtype=torch.long, device=self.device)
                u.tokens_forwarded += T
                if node.outs:
                    poss = sorted({o[2] for o in node.outs})
                    where = {p: j for j, p in enumerate(poss)}
                    out_pos = torch.tensor([p - node.start for p in poss], dtype=torch.long, device=self.device)
                    hid = self.forward(cache, toks, out_pos=out_pos)
                    self._fill(lp, node.outs, hid, [where[o[2]] for o in node.outs], temps)
                else:
                    self.forward(cache, toks)
            stack.extend(reversed(node.children))

    def _score_tree(self, prep, root, lp, u, pack_tokens, temps):
        def size(n):
            return (n.end - n.start) + sum(size(ch) for ch in n.children)
        packs, cur, n = [], [], 0
        for ch in root.children:  # subtrees of the root, packed up to pack_tokens
            sz = size(ch)
            if cur and n + sz > pack_tokens:
                packs.append(cur)
                cur, n = [], 0
            cur.append(ch)
            n += sz
        packs.append(cur)
        for pack in packs:
            nodes, parent = [], []  # pre-order: every ancestor before its descendants

            def visit(nd, par, children):
                if not (nd.outs or nd.children):
                    return
                idx = len(nodes)
                nodes.append(nd)
                parent.append(par)
                for ch in children:
                    visit(ch, idx, ch.children)
            visit(root, -1, pack)
            toks, pos, node_of, offset = [], [], [], []
            for idx, nd in enumerate(nodes):
                offset.append(len(toks))
                toks.extend(prep[nd.ref][0][nd.start:nd.end])
                pos.extend(range(nd.start, nd.end))
                node_of.extend([idx] * (nd.end - nd.start))
            if not toks:
                continue
            anc = torch.zeros(len(nodes), len(nodes), dtype=torch.bool)
            for idx in range(len(nodes)):
                if parent[idx] >= 0:
                    anc[idx] = anc[parent[idx]]
                anc[idx, idx] = True
            outs, out_at = [], []
            for idx, nd in enumerate(nodes):
                for o in nd.outs:
                    outs.append(o)
                    out_at.append(offset[idx] + o[2] - nd.start)
            uniq = sorted(set(out_at))
            where = {p: j for j, p in enumerate(uniq)}
            hid = self.forward_packed(toks, pos, node_of, anc, uniq)
            self._fill(lp, outs, hid, [where[p] for p in out_at], temps)
            u.tokens_forwarded += len(toks)

    @torch.no_grad()
    def forward_packed(self, toks, pos, node_of, anc, out_idx):
        """One forward over a packed token tree: token i sits at position pos[i] in node
        node_of[i] and sees the tokens j <= i whose node is an ancestor of (or is) its own
        (anc[n, m]: m is an ancestor of n or n itself; ancestors come first). Returns the
        final-norm hidden states of the packed indices out_idx."""
        c, dev = self.cfg, self.device
        U = len(toks)
        toks_t = torch.tensor(toks, dtype=torch.long, device=dev)
        pos_t = torch.tensor(pos, dtype=torch.long, device=dev)
        node_t = torch.tensor(node_of, dtype=torch.long, device=dev)
        anc_t = anc.to(dev)
        out_t = torch.tensor(out_idx, dtype=torch.long, device=dev)
        kidx = torch.arange(U, device=dev)
        cos, sin = self._rope_tables(pos_t)
        x = self.embed[toks_t]
        # The pack's mask, built once: token i sees the tokens j <= i of its node's ancestors.
        mask = anc_t[node_t][:, node_t] & (kidx[None, :] <= kidx[:, None])
        for li in range(c.layers):
            W = self.layer_w[li]
            q, k, v = self._qkv(W, x, cos, sin)
            if li == c.layers - 1:  # the last layer only for the wanted positions
                x, q, mask = x[out_t], q[out_t], mask[out_t]
            a = self._attend(q, k.permute(1, 0, 2), v.permute(1, 0, 2), mask=mask)
            x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
            h = self._rms(x, W["post_attention_layernorm.weight"])
            gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
            up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))
        return self._rms(x, self.norm)

    @torch.no_grad()
    def score_rows_naive(self, rows):
        """Scores every row on its own from an empty cache (no prefix sharing): the
        baseline score_rows is tested and measured against."""
        prep, u = self._prepare(rows)
        temps = self._temperatures(rows)
        out = []
        for (seq, cl, a, b), temp in zip(prep, temps):
            cache = Cache(self, len(seq), self.cfg.layers)
            toks = torch.tensor(seq, dtype=torch.long, device=self.device)
            pos = torch.arange(cl + a - 1, cl + b - 1, device=self.device)
            hid = self.forward(cache, toks, out_pos=pos)
            tt = torch.full((b - a,), temp, dtype=torch.float64, device=self.device)
            out.append(math.fsum(self._log_probs(hid, toks[pos + 1], tt).tolist()) / (b - a))
            u.tokens_forwarded += len(seq)
        return out, u
