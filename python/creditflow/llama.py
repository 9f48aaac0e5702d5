"""The one torch Llama-family decoder (Llama, Qwen2, Qwen3) of creditflow's Python code: the
network's arithmetic, shared by the loop's policy (creditflow.policy: training and sampling)
and the GPU scorer pod (cfpod: LAPO row scores and AttnSR step graphs, docs/method.md).

Guarantees:
- The arithmetic is the one of the Go reference model (scorer/cpumodel, docs/model.md):
  RMSNorm with the weight applied after normalization (the normalization in float32),
  rotate-half RoPE from float32 inverse frequencies with cosines and sines computed in
  float64, grouped-query attention, SwiGLU, optional q/k/v(/o) and MLP biases (Qwen2,
  Llama's attention_bias), per-head q/k RMSNorm before RoPE (Qwen3). In float32 on the CPU
  it agrees with the Go reference to float32 rounding.
- Llama holds weights, not modules: tensors under Hugging Face's names, whatever owns them
  (the pod's loaded tensors, or the parameters of the policy's torch module, through which
  gradients flow). The same call computes the same numbers for both.
- Attention is the caller's: decode hands every layer's rotated queries, keys and values to
  an attend function, which caches keys and values as it needs (the pod's prefix tree, the
  policy's incremental decoding) and returns the attention output. attention() is the
  batched float32 reference for callers without kernels of their own.
- torch alone: importing this module imports neither numpy nor confluent_kafka (the pod
  needs torch and the standard library only).
"""

import math

import torch
import torch.nn.functional as F

__all__ = ["Llama", "Shape", "attention", "rms_norm", "rope", "rope_inv_freq", "rope_tables"]


class Shape:
    """The part of a Hugging Face config the forward reads, for a plain LlamaForCausalLM
    config dict (the policy's checkpoints). The pod's cfpod.config.Config has the same
    attributes and validates every architecture."""

    def __init__(self, h):
        self.hidden = h["hidden_size"]
        self.layers = h["num_hidden_layers"]
        self.heads = h["num_attention_heads"]
        self.kv_heads = h.get("num_key_value_heads") or self.heads
        self.head_dim = h.get("head_dim") or self.hidden // self.heads
        self.intermediate = h["intermediate_size"]
        self.vocab = h["vocab_size"]
        self.rms_norm_eps = float(h.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(h.get("rope_theta", 10000.0))
        self.qk_norm = False
        self.inv_freq = rope_inv_freq(self.head_dim, self.rope_theta)


def rope_inv_freq(head_dim, theta):
    """The default rotary inverse frequencies theta^(-2i/d), i < d/2, as float32: the
    exponent 2i/d in float32, the power in float64 (as the Go reference computes them)."""
    inv = []
    for i in range(head_dim // 2):
        e = float(torch.tensor(2 * i, dtype=torch.float32) / torch.tensor(head_dim, dtype=torch.float32))
        inv.append(1.0 / math.pow(theta, e))
    return torch.tensor(inv, dtype=torch.float32)


def rms_norm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps), normalized in float32, in x's dtype."""
    xf = x.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * (xf * r).to(x.dtype)


def rope_tables(pos, inv_freq, dtype):
    """cos and sin [..., head_dim] of positions pos (any integer shape): angles in float32,
    their cosines and sines in float64, rounded to dtype."""
    ang = pos.to(torch.float32)[..., None] * inv_freq
    cos = torch.cos(ang.double()).to(dtype)
    sin = torch.sin(ang.double()).to(dtype)
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


def rope(x, cos, sin):
    """Rotate-half RoPE of x [..., n, heads, head_dim] with the tables of its n positions
    (cos, sin [..., n, head_dim])."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos.unsqueeze(-2) + rot * sin.unsqueeze(-2)


def attention(q, k, v, allowed):
    """Attention of queries q [B, T, Hq, D] over keys and values [B, S, Hkv, D] (query head h
    reads key/value head h // (Hq / Hkv)) where allowed [B, T, S] is true: float32 scores
    scaled by 1/sqrt(D) and softmax, returned as [B, T, Hq * D] in q's dtype."""
    B, T, Hq, D = q.shape
    group = Hq // k.shape[2]
    qh = q.transpose(1, 2).float()
    kh, vh = k.transpose(1, 2).float(), v.transpose(1, 2).float()
    if group > 1:
        kh, vh = kh.repeat_interleave(group, 1), vh.repeat_interleave(group, 1)
    sc = torch.matmul(qh, kh.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    p = torch.softmax(sc.masked_fill(~allowed[:, None], float("-inf")), -1)
    return torch.matmul(p, vh).to(q.dtype).transpose(1, 2).reshape(B, T, Hq * D)


class Llama:
    """A decoder stack's weights and its forward arithmetic. cfg: a Shape or anything with its
    attributes (heads, kv_heads, head_dim, layers, rms_norm_eps, qk_norm, inv_freq). layers:
    one mapping per decoder layer from the names below "model.layers.<i>." (for example
    "self_attn.q_proj.weight") to tensors; a bias or q/k norm absent from it is absent from
    the network."""

    def __init__(self, cfg, embed, norm, lm_head, layers, inv_freq=None):
        self.cfg = cfg
        self.embed, self.norm, self.lm_head, self.layers = embed, norm, lm_head, layers
        self.inv_freq = (cfg.inv_freq if inv_freq is None else inv_freq).to(embed.device)

    def tables(self, pos):
        """The rotary tables of positions pos, in the weights' dtype."""
        return rope_tables(pos, self.inv_freq, self.embed.dtype)

    def qkv(self, li, x, cos, sin):
        """Queries [..., n, Hq, D], keys and values [..., n, Hkv, D] of layer li for the hidden
        states x [..., n, hidden]: the input norm, the projections (biases where the weights
        have them), q/k norms (Qwen3) and RoPE on q and k."""
        c, W = self.cfg, self.layers[li]
        h = rms_norm(x, W["input_layernorm.weight"], c.rms_norm_eps)
        lead = h.shape[:-1]
        k = F.linear(h, W["self_attn.k_proj.weight"], W.get("self_attn.k_proj.bias")).view(*lead, c.kv_heads, c.head_dim)
        v = F.linear(h, W["self_attn.v_proj.weight"], W.get("self_attn.v_proj.bias")).view(*lead, c.kv_heads, c.head_dim)
        q = F.linear(h, W["self_attn.q_proj.weight"], W.get("self_attn.q_proj.bias")).view(*lead, c.heads, c.head_dim)
        if c.qk_norm:
            q = rms_norm(q, W["self_attn.q_norm.weight"], c.rms_norm_eps)
            k = rms_norm(k, W["self_attn.k_norm.weight"], c.rms_norm_eps)
        return rope(q, cos, sin), rope(k, cos, sin), v

    def finish(self, li, x, a):
        """The rest of layer li after attention: x plus the output projection of the attention
        output a [..., n, Hq * D], then the SwiGLU MLP block on its post-attention norm."""
        W = self.layers[li]
        x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
        h = rms_norm(x, W["post_attention_layernorm.weight"], self.cfg.rms_norm_eps)
        gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
        up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
        return x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))

    def final_norm(self, x):
        return rms_norm(x, self.norm, self.cfg.rms_norm_eps)

    def logits(self, x):
        """The LM head on final-norm hidden states x."""
        return F.linear(x, self.lm_head)

    def decode(self, toks, pos, attend, layers=None, keep=None):
        """The decoder layers on tokens toks (any shape [..., n]) at positions pos (same shape):
        layers 0 .. layers - 1 (default all). attend(li, q, k, v) returns the attention output
        [..., n', Hq * D] of the queries q it is given over keys and values it keeps itself
        (k and v are those of all n tokens), or None to stop there (decode returns None).
        keep (an index into the n positions): the last layer's queries and everything after
        them only for those positions (the keys and values of all are still handed over).
        Returns the hidden states after the last layer, before the final norm."""
        n = self.cfg.layers if layers is None else layers
        cos, sin = self.tables(pos)
        x = self.embed[toks]
        for li in range(n):
            q, k, v = self.qkv(li, x, cos, sin)
            if keep is not None and li == self.cfg.layers - 1:
                x, q = x[keep], q[keep]
            a = attend(li, q, k, v)
            if a is None:
                return None
            x = self.finish(li, x, a)
        return x
