"""AttnSR step graphs (Model.graphs, a member of Model): step_graphs computes attention probabilities in query
blocks of QUERY_BLOCK tokens, never an N x N matrix, and sums them in float64;
step_graphs_dense is the naive baseline it is tested against."""

import math

import torch
import torch.nn.functional as F

from .config import InputError

QUERY_BLOCK = 128


class StepGraphs:
    """The attention reader of a model: step graphs from the rotated queries and cached keys
    its forward passes (forward.Forward.cached) hand over layer by layer."""

    def __init__(self, forward):
        self.forward, self.cfg, self.device = forward, forward.cfg, forward.device

    def _validate_graph_input(self, tokens, steps, layers):
        N, c = len(tokens), self.cfg
        if N == 0:
            raise InputError("empty token array")
        if N > c.max_context:
            raise InputError(f"{N} tokens exceed the model's context of {c.max_context}")
        for i, t in enumerate(tokens):
            if not 0 <= t < c.vocab:
                raise InputError(f"token {i} is {t}, outside the vocabulary [0, {c.vocab})")
        if not layers:
            raise InputError(f"no layers requested (the model has {c.layers})")
        for l in layers:
            if not 0 <= l < c.layers:
                raise InputError(f"layer {l} does not exist: the model has layers 0..{c.layers - 1}")
        prev = 0
        for j, (a, o) in enumerate(steps):
            if a[0] < prev or a[0] > a[1] or a[1] > N:
                raise InputError(f"step {j}: action range [{a[0]}, {a[1]}) must lie inside the {N} tokens, "
                                 f"after the previous step (which ends at {prev}), with start <= end")
            prev = a[1]
            if o is not None and o[0] != o[1]:
                if o[0] < a[1] or o[0] > o[1] or o[1] > N:
                    raise InputError(f"step {j}: observation range [{o[0]}, {o[1]}) must lie inside the {N} "
                                     f"tokens, after the step's action (which ends at {a[1]}), with start <= end")
                prev = o[1]

    @torch.no_grad()
    def step_graphs(self, tokens, steps, layers, block=QUERY_BLOCK):
        """G_AA and G_AO (docs/method.md §3.1) on each requested layer, in the order of layers (repeats
        allowed). steps: [((a0, a1), (o0, o1) or None)], half-open ranges into tokens.
        Returns [(layer, AA, AO)] with K x K nested lists of floats (row j = querying step,
        zeros where k >= j). One forward pass up to the deepest requested layer; for every
        query token inside an action, the causal attention probabilities over all keys <= q
        (normalized over the full prefix) are summed over each earlier step's action and
        observation keys, then averaged over the step's query tokens and all heads. Queries
        go in blocks of `block` tokens: O(block x N) probabilities per head at a time."""
        self._validate_graph_input(tokens, steps, layers)
        c = self.cfg
        K, N = len(steps), len(tokens)
        want = set(layers)
        deepest = max(layers)
        dev = self.device
        # Key → column: action of step k → k, observation of step k → K + k, others → 2K.
        seg = torch.full((N,), 2 * K, dtype=torch.long)
        qpos, qstep = [], []
        for k, (a, o) in enumerate(steps):
            seg[a[0]:a[1]] = k
            if o is not None and o[0] != o[1]:
                seg[o[0]:o[1]] = K + k
            qpos.extend(range(a[0], a[1]))
            qstep.extend([k] * (a[1] - a[0]))
        seg_m = F.one_hot(seg, 2 * K + 1)[:, :2 * K].to(device=dev, dtype=torch.float64)  # [N, 2K]
        qpos_t = torch.tensor(qpos, dtype=torch.long, device=dev)
        qstep_t = torch.tensor(qstep, dtype=torch.long, device=dev)
        counts = torch.zeros(K, dtype=torch.float64)
        for k, (a, _) in enumerate(steps):
            counts[k] = (a[1] - a[0]) * c.heads
        got = {}
        group = c.heads // c.kv_heads
        scale = 1.0 / math.sqrt(c.head_dim)

        def on_q(li, q, cache):
            if li not in want:
                return
            acc = torch.zeros(K, 2 * K, dtype=torch.float64, device=dev)
            for s in range(0, len(qpos), block):
                pos = qpos_t[s:s + block]
                B = pos.shape[0]
                S = qpos[s + B - 1] + 1  # queries are in increasing order
                qb = q[pos].float().permute(1, 0, 2).reshape(c.kv_heads, group, B, c.head_dim)
                kb = cache.k[li][:, :S].float().transpose(1, 2)[:, None]  # [Hkv, 1, D, S]
                sc = torch.matmul(qb, kb) * scale  # [Hkv, g, B, S]
                sc.masked_fill_(torch.arange(S, device=dev)[None, :] > pos[:, None], float("-inf"))
                p = torch.softmax(sc, -1).sum(dim=(0, 1), dtype=torch.float64)  # [B, S], summed over heads
                per_step = F.one_hot(qstep_t[s:s + block], K).to(torch.float64).T @ p  # [K, S]
                acc += per_step @ seg_m[:S]
            acc = acc.cpu()
            div = counts.clamp(min=1)[:, None]
            acc = acc / div
            tri = torch.tril(torch.ones(K, K, dtype=torch.float64), -1)
            got[li] = ((acc[:, :K] * tri).tolist(), (acc[:, K:] * tri).tolist())

        cache = self.forward.cache(N, deepest + 1)
        toks = torch.tensor(tokens, dtype=torch.long, device=dev)
        self.forward.cached(cache, toks, layers=deepest + 1, on_q=on_q)
        return [(l, [r[:] for r in got[l][0]], [r[:] for r in got[l][1]]) for l in layers]

    @torch.no_grad()
    def step_graphs_dense(self, tokens, steps, layers):
        """The same graphs from full N x N float64 attention matrices: a reference for tests
        (O(N^2) memory)."""
        self._validate_graph_input(tokens, steps, layers)
        c = self.cfg
        K, N = len(steps), len(tokens)
        got = {}
        group = c.heads // c.kv_heads

        def on_q(li, q, cache):
            if li not in layers:
                return
            AA = [[0.0] * K for _ in range(K)]
            AO = [[0.0] * K for _ in range(K)]
            for h in range(c.heads):
                qh = q[:, h].double()
                kh = cache.k[li][h // group, :N].double()
                sc = qh @ kh.T / math.sqrt(c.head_dim)
                sc.masked_fill_(torch.triu(torch.ones(N, N, dtype=torch.bool, device=sc.device), 1), float("-inf"))
                P = torch.softmax(sc, -1).cpu()
                for j, (a, _) in enumerate(steps):
                    for k in range(j):
                        ak, ok = steps[k]
                        AA[j][k] += float(P[a[0]:a[1], ak[0]:ak[1]].sum())
                        if ok is not None and ok[0] != ok[1]:
                            AO[j][k] += float(P[a[0]:a[1], ok[0]:ok[1]].sum())
            for j, (a, _) in enumerate(steps):
                n = (a[1] - a[0]) * c.heads
                for k in range(j):
                    if n:
                        AA[j][k] /= n
                        AO[j][k] /= n
            got[li] = (AA, AO)

        cache = self.forward.cache(N, max(layers) + 1)
        self.forward.cached(cache, torch.tensor(tokens, dtype=torch.long, device=self.device),
                     layers=max(layers) + 1, on_q=on_q)
        return [(l, got[l][0], got[l][1]) for l in layers]
