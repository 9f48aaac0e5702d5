"""Running a row plan (rowplan.py) on the model: the model calls of one score request with
one upload of its indices and one read of its results.

Guarantees:
- host to device: the plan's two arrays (integers, temperatures), once per request; every
  call takes slices of them, so no call waits on a copy;
- device to host: one read per request, after the last call: the log-probabilities of every
  scored token (float32 LM head, float64 softmax), kept on the device until then;
- Model.counts counts what the device sees (model calls, uploads, reads, tokens), for
  cfpod.bench's per-request counts.
"""

import torch
import torch.nn.functional as F

from .cache import Cache


class Counts:
    """What a request made the device do: model calls, host-to-device uploads, device-to-host
    reads (each a blocking host sync on an accelerator), tokens forwarded."""

    __slots__ = ("calls", "uploads", "reads", "tokens")

    def __init__(self):
        self.calls = self.uploads = self.reads = self.tokens = 0

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class _PlanRunner:
    """The plan-running methods of Model."""

    def _count(self, what, n=1):
        c = getattr(self, "counts", None)
        if c is not None:
            setattr(c, what, getattr(c, what) + n)

    def upload(self, values, dtype=torch.long):
        self._count("uploads")
        return torch.tensor(values, dtype=dtype, device=self.device)

    def read(self, t):
        self._count("reads")
        return t.tolist()

    @torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()
    def run_plan(self, prep, plan):
        """The log-probability of every scored token of plan, in plan.outs order (floats)."""
        if not plan.outs:
            return []
        ints = self.upload(plan.ints)
        temps = self.upload(plan.temps, torch.float64)
        cache = None
        if plan.needs_cache:  # edges, packs on a cached path, packs that leave one
            cache = Cache(self, max(len(p[0]) for p in prep), self.cfg.layers)
        lps, done = [], 0
        for call in plan.calls:
            self._count("calls")
            if call[0] == "edge":
                _, start, end, tok_off, outs = call
                self._count("tokens", end - start)
                cache.n = start
                toks = ints[tok_off:tok_off + end - start]
                if outs is None:
                    self.forward(cache, toks)
                    continue
                n_uniq, pos_off, n_outs, sel_off = outs
                hid = self.forward(cache, toks, out_pos=ints[pos_off:pos_off + n_uniq])
            else:
                _, prefix, U, tok_off, pos_off, node_off, n_nodes, anc_off, outs = call
                self._count("tokens", U)
                # A pack without scored tokens still leaves its path's keys and values in
                # the cache for the calls below it.
                n_uniq, opos_off, n_outs, sel_off = outs if outs is not None else (0, 0, 0, 0)
                hid = self.forward_packed(ints[tok_off:tok_off + U], ints[pos_off:pos_off + U],
                                          ints[node_off:node_off + U],
                                          ints[anc_off:anc_off + n_nodes * n_nodes].view(n_nodes, n_nodes).bool(),
                                          ints[opos_off:opos_off + n_uniq], cache, prefix)
                if outs is None:
                    continue
            # The LM head per call, on the call's own rows (matmul rounding depends on the
            # batch, and these are the batches row-by-row scoring makes for a row's span).
            o = done
            lps.append(self._log_probs(hid[ints[sel_off:sel_off + n_outs]],
                                       ints[plan.target_off + o:plan.target_off + o + n_outs], temps[o:o + n_outs]))
            done += n_outs
        return self.read(torch.cat(lps) if len(lps) > 1 else lps[0])

    def forward_packed(self, toks, pos, node_of, anc, out_idx, cache=None, prefix=0):
        """One forward over a packed token tree on top of cache positions [0, prefix) (every
        pack token sees them all): token i sits at position pos[i] in node node_of[i] and
        sees the pack tokens j <= i whose node is an ancestor of (or is) its own (anc[n, m]:
        m is an ancestor of n or n itself; ancestors come first). Returns the final-norm
        hidden states of the packed indices out_idx. The pack's keys and values go to cache
        positions [prefix, prefix + len(toks)), which the next call overwrites."""
        c, dev = self.cfg, self.device
        U = int(toks.shape[0])
        kidx = torch.arange(U, device=dev)
        cos, sin = self._rope_tables(pos)
        x = self.embed[toks]
        # The pack's mask, built once: the cached path (all visible), then the pack's own
        # ancestors. The fused kernels take it whole; the reference path masks only the
        # pack's columns.
        mask = anc[node_of][:, node_of] & (kidx[None, :] <= kidx[:, None])
        mask_from = 0
        if prefix > 0 and self.use_sdpa:
            mask = torch.cat([torch.ones(U, prefix, dtype=torch.bool, device=dev), mask], 1)
        elif prefix > 0:
            mask_from = prefix
        if cache is not None:
            cache.n = prefix  # the path; ensure keeps it when it grows the cache
            cache.ensure(prefix + U)
        for li in range(c.layers):
            W = self.layer_w[li]
            q, k, v = self._qkv(W, x, cos, sin)
            if li == c.layers - 1:  # the last layer only for the wanted positions
                x, q, mask = x[out_idx], q[out_idx], mask[out_idx]
            if cache is not None:
                cache.k[li][:, prefix:prefix + U] = k.permute(1, 0, 2)
                cache.v[li][:, prefix:prefix + U] = v.permute(1, 0, 2)
                K, V = cache.k[li][:, :prefix + U], cache.v[li][:, :prefix + U]
            else:
                K, V = k.permute(1, 0, 2), v.permute(1, 0, 2)
            a = self._attend(q, K, V, mask=mask, mask_from=mask_from)
            x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
            h = self._rms(x, W["post_attention_layernorm.weight"])
            gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
            up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))
        return self._rms(x, self.norm)
