"""Grouped-query attention of the pod's forward passes, on fused kernels where torch has them.

attend(q, K, V, causal=True) is causal attention whose T queries are the last T positions of
the S keys (a whole sequence when T == S, an edge on top of a cached prefix when T < S: the
"lower-right" causal alignment); attend(q, K, V, mask=M) takes the keys M [T, S] allows
(tree packs, chosen query positions).

Guarantees:
- use_sdpa (the accelerator path) calls torch's scaled_dot_product_attention: plain causal
  as is_causal, a cached prefix with torch's lower-right causal bias (no mask is built)
  where this torch has it (HAS_LOWER_RIGHT, torch >= 2.3), else with an explicit mask;
  grouped key/value heads through enable_gqa where this torch has it (HAS_GQA, torch >= 2.5;
  no per-layer copy of K and V; with the lower-right bias only where that combination runs,
  HAS_LOWER_RIGHT_GQA), else repeated per query head. Each feature is probed on a tiny
  input when the module loads, so a torch that lacks one falls back instead of failing. A masked call goes in query
  chunks so that a kernel that materializes scores holds at most 2^27 of them.
- the reference path (CPU, or torch without SDPA) computes float32 scores and softmax in
  query blocks of at most 2^24 scores, whatever the dtype; it is the arithmetic the Go
  reference scorer does.
- both paths return [T, Hq * D] in the dtype of q; no queries (T = 0, the last layer of a
  tree pack without scored tokens) return an empty result without calling a kernel.
"""

import math

import torch
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def _probe_gqa():
    if not HAS_SDPA:
        return False
    x, kv = torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 2, 8)
    try:
        F.scaled_dot_product_attention(x, kv, kv, enable_gqa=True)
    except TypeError:
        return False
    return True


def _probe_lower_right():
    if not HAS_SDPA:
        return None
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        return None
    try:
        x = torch.zeros(1, 2, 2, 8)
        F.scaled_dot_product_attention(x, torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8),
                                       attn_mask=causal_lower_right(2, 3))
    except (TypeError, RuntimeError, NotImplementedError):
        return None
    return causal_lower_right


def _probe_lower_right_gqa():
    """Whether the lower-right bias takes enable_gqa too (its dispatch may not pass it on)."""
    if _lower_right_bias is None or not HAS_GQA:
        return False
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8),
                                       attn_mask=_lower_right_bias(2, 3), enable_gqa=True)
    except (TypeError, RuntimeError, NotImplementedError):
        return False
    return True


HAS_GQA = _probe_gqa()
_lower_right_bias = _probe_lower_right()
HAS_LOWER_RIGHT = _lower_right_bias is not None
HAS_LOWER_RIGHT_GQA = _probe_lower_right_gqa()

# The kernels attend calls (tests swap in reference implementations of the same contract to
# run the SDPA path on a torch that lacks it).
_sdpa = F.scaled_dot_product_attention if HAS_SDPA else None


def _lower_right(T, S, device):
    return _lower_right_bias(T, S)


def causal_mask(T, S, device):
    """The bool [T, S] mask of lower-right causal attention: query i sits at S - T + i."""
    return torch.arange(S, device=device)[None, :] <= torch.arange(S - T, S, device=device)[:, None]


MASKED_SCORES = 1 << 27
REFERENCE_SCORES = 1 << 24


def attend(q, K, V, causal=False, mask=None, use_sdpa=False, mask_from=0):
    """Attention of queries q [T, Hq, D] over keys and values [Hkv, S, D] (Hq a multiple of
    Hkv, query head h reads key/value head h // (Hq / Hkv)); causal or mask as above; with
    mask_from > 0 every query sees keys [0, mask_from) and mask [T, S - mask_from] covers
    the rest. Returns [T, Hq * D]."""
    T, Hq, D = q.shape
    Hkv, S = K.shape[0], K.shape[1]
    group = Hq // Hkv
    if (mask is None) == (not causal):
        raise ValueError("attend takes causal=True or a mask, not both")
    if T == 0:  # no queries (a tree pack whose tokens only fill the cache): nothing to attend
        return q.new_empty(0, Hq * D)
    qh = q.permute(1, 0, 2)  # [Hq, T, D]
    if mask_from and use_sdpa:
        mask = torch.cat([torch.ones(T, mask_from, dtype=torch.bool, device=q.device), mask], 1)
    elif mask_from:
        mask = (mask_from, mask)
    if use_sdpa:
        o = _attend_sdpa(qh, K, V, group, T, S, causal, mask)
    else:
        o = _attend_reference(qh, K, V, group, T, S, causal, mask)
    return o.permute(1, 0, 2).reshape(T, Hq * D)


def _attend_sdpa(qh, K, V, group, T, S, causal, mask):
    dev = qh.device
    if causal and (T == S or HAS_LOWER_RIGHT):
        kw = {}
        Kx, Vx = K, V
        if group > 1:
            if HAS_GQA and (T == S or HAS_LOWER_RIGHT_GQA):
                kw["enable_gqa"] = True
            else:
                Kx, Vx = K.repeat_interleave(group, 0), V.repeat_interleave(group, 0)
        if T == S:
            return _sdpa(qh[None], Kx[None], Vx[None], is_causal=True, **kw)[0]
        return _sdpa(qh[None], Kx[None], Vx[None], attn_mask=_lower_right(T, S, dev), **kw)[0]
    if causal:
        mask = causal_mask(T, S, dev)
    # A masked call may run on a kernel that materializes the scores; the memory-efficient
    # kernel takes masks but not grouped heads on every torch, so K and V are repeated here.
    Kx = K.repeat_interleave(group, 0) if group > 1 else K
    Vx = V.repeat_interleave(group, 0) if group > 1 else V
    step = max(1, MASKED_SCORES // max(S * qh.shape[0], 1))
    outs = []
    for s in range(0, T, step):
        e = min(T, s + step)
        outs.append(_sdpa(qh[None, :, s:e], Kx[None], Vx[None], attn_mask=mask[s:e][None, None])[0])
    return outs[0] if len(outs) == 1 else torch.cat(outs, 1)


def _attend_reference(qh, K, V, group, T, S, causal, mask):
    """Float32 scores and softmax in query blocks. Keys every query of a block may see (a
    cached prefix) are not masked: only the block's last columns are."""
    Hq, _, D = qh.shape
    Hkv = K.shape[0]
    scale = 1.0 / math.sqrt(D)
    qg = qh.reshape(Hkv, group, T, D)
    out = torch.empty(Hkv, group, T, D, dtype=qh.dtype, device=qh.device)
    step = max(1, REFERENCE_SCORES // max(S * Hq, 1))
    Kt = K.float().transpose(1, 2)[:, None]  # [Hkv, 1, D, S]
    Vf = V.float()[:, None]
    dev = qh.device
    for s in range(0, T, step):
        e = min(T, s + step)
        sc = torch.matmul(qg[:, :, s:e].float(), Kt) * scale  # [Hkv, g, b, S]
        if causal:  # query i sees keys <= S - T + i: columns from S - T + s + 1 on need a mask
            c0 = S - T + s + 1
            if c0 < S:
                allowed = (torch.arange(c0, S, device=dev)[None, :]
                           <= torch.arange(S - T + s, S - T + e, device=dev)[:, None])
                sc[..., c0:].masked_fill_(~allowed, float("-inf"))
        elif isinstance(mask, tuple):  # (mask_from, mask of the later columns)
            sc[..., mask[0]:].masked_fill_(~mask[1][s:e], float("-inf"))
        else:
            sc.masked_fill_(~mask[s:e], float("-inf"))
        p = torch.softmax(sc, -1)
        out[:, :, s:e] = torch.matmul(p, Vf).to(qh.dtype)
    return out.reshape(Hq, T, D)
