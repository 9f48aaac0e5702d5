"""The pod's forward passes: the one Llama-family network of creditflow (creditflow.llama) run
on the pod's key/value cache with the pod's attention kernels (attention.py).

Three ways through the same layers (creditflow.llama.Llama.decode), which differ only in
what each layer attends to:
- cached: a chunk of one sequence on top of the cache's prefix (prefix-sharing walks, step
  graphs, row-by-row scoring);
- packed: a tree of tokens in one call on top of a cached path (tree packing, rowrun.py);
- batch: right-padded rows from position 0 (the padded baseline, padded.py).
"""

import torch

from . import attention
from .cache import Cache

# Model work runs without autograd bookkeeping (torch.inference_mode where torch has it).
inference = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad


class Forward:
    """The network (a creditflow.llama.Llama) on one device in one dtype, and the attention
    kernels it runs with: fused SDPA on accelerators, the float32 reference elsewhere
    (use_sdpa; Model.set_attention chooses either on any device)."""

    def __init__(self, net, device, dtype):
        self.net, self.cfg, self.device, self.dtype = net, net.cfg, device, dtype
        self.use_sdpa = attention.HAS_SDPA and device.type == "cuda"

    def cache(self, cap, layers):
        """An empty key/value cache of cap positions for the first layers."""
        return Cache(self, cap, layers)

    def attend(self, q, K, V, causal=False, mask=None, mask_from=0):
        """Attention of queries q [T, Hq, D] over keys and values [Hkv, S, D] (attention.attend):
        causal (the queries are the last T of the S positions) or the keys mask [T, S] allows
        (with mask_from: keys [0, mask_from) visible to all, mask over the rest)."""
        return attention.attend(q, K, V, causal=causal, mask=mask, use_sdpa=self.use_sdpa, mask_from=mask_from)

    @inference()
    def cached(self, cache, toks, out_pos=None, layers=None, on_q=None):
        """Appends toks (LongTensor [T]) to cache at positions cache.n, ... and returns the
        final-norm hidden states of the chunk positions in out_pos (LongTensor of chunk
        indices), or None. layers limits the decoder layers run; on_q(layer, q, cache) sees
        every layer's rotated queries [T, heads, head_dim] once its keys are cached."""
        c = self.cfg
        T = int(toks.shape[0])
        pos0 = cache.n
        cache.ensure(pos0 + T)
        cache.n = pos0 + T
        nl = c.layers if layers is None else layers
        pos = torch.arange(pos0, pos0 + T, device=self.device)
        # Last layer: keys and values of every position are cached, but only the wanted
        # positions need the rest of the layer.
        keep = out_pos if on_q is None else None
        qpos = pos if keep is None else pos[keep]

        def attend(li, q, k, v):
            cache.k[li][:, pos0:pos0 + T] = k.permute(1, 0, 2)
            cache.v[li][:, pos0:pos0 + T] = v.permute(1, 0, 2)
            if on_q is not None:
                on_q(li, q, cache)
                if li == nl - 1 and out_pos is None:
                    return None
            if li == c.layers - 1 and on_q is None and out_pos is None:
                return None  # only the cache was wanted
            if q.shape[0] == T:  # every position of the chunk: causal, lower-right aligned
                return self.attend(q, cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T], causal=True)
            keys = torch.arange(pos0 + T, device=self.device)  # the wanted positions only
            return self.attend(q, cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T],
                               mask=keys[None, :] <= qpos[:, None])

        x = self.net.decode(toks, pos, attend, layers=nl, keep=keep)
        if x is None or out_pos is None:
            return None
        if keep is None or nl < c.layers:  # the last layer (where keep applies) did not run
            x = x[out_pos]
        return self.net.final_norm(x)

    def packed(self, toks, pos, node_of, anc, out_idx, cache=None, prefix=0):
        """One forward over a packed token tree on top of cache positions [0, prefix) (every
        pack token sees them all): token i sits at position pos[i] in node node_of[i] and
        sees the pack tokens j <= i whose node is an ancestor of (or is) its own (anc[n, m]:
        m is an ancestor of n or n itself; ancestors come first). Returns the final-norm
        hidden states of the packed indices out_idx. The pack's keys and values go to cache
        positions [prefix, prefix + len(toks)), which the next call overwrites."""
        c, dev = self.cfg, self.device
        U = int(toks.shape[0])
        kidx = torch.arange(U, device=dev)
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

        def attend(li, q, k, v):
            m = mask[out_idx] if li == c.layers - 1 else mask  # the last layer only for the wanted positions
            if cache is not None:
                cache.k[li][:, prefix:prefix + U] = k.permute(1, 0, 2)
                cache.v[li][:, prefix:prefix + U] = v.permute(1, 0, 2)
                K, V = cache.k[li][:, :prefix + U], cache.v[li][:, :prefix + U]
            else:
                K, V = k.permute(1, 0, 2), v.permute(1, 0, 2)
            return self.attend(q, K, V, mask=m, mask_from=mask_from)

        return self.net.final_norm(self.net.decode(toks, pos, attend, keep=out_idx))

    @inference()
    def batch(self, toks, out_idx):
        """One forward over right-padded rows toks [B, L] from position 0 (padding after a
        row's tokens: causal attention never lets a real token see it), every position
        through every layer as a padded batch computes it. Returns the final-norm hidden
        states of the flat indices out_idx (row * L + position)."""
        c = self.cfg
        B, L = toks.shape
        pos = torch.arange(L, device=self.device).repeat(B)

        def attend(li, q, k, v):  # [B*L, H, D]
            return self.attend_batch(q.view(B, L, c.heads, c.head_dim), k.view(B, L, c.kv_heads, c.head_dim),
                                     v.view(B, L, c.kv_heads, c.head_dim))

        x = self.net.decode(toks.reshape(-1), pos, attend)
        return self.net.final_norm(x[out_idx])

    def attend_batch(self, q, k, v):
        """Causal attention of B rows at once ([B, L, H, D] each): one fused call on the
        accelerator path, row by row on the reference path. Returns [B*L, Hq*D]."""
        B, L, H, D = q.shape
        if self.use_sdpa:
            qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            kw = {}
            if H != kh.shape[1]:
                if attention.HAS_GQA:
                    kw["enable_gqa"] = True
                else:
                    kh, vh = kh.repeat_interleave(H // kh.shape[1], 1), vh.repeat_interleave(H // kh.shape[1], 1)
            o = attention._sdpa(qh, kh, vh, is_causal=True, **kw)
            return o.transpose(1, 2).reshape(B * L, H * D)
        return torch.cat([attention.attend(q[r], k[r].permute(1, 0, 2), v[r].permute(1, 0, 2), causal=True)
                          for r in range(B)])
