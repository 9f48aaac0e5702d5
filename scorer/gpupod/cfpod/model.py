"""A compact Llama-family decoder (Llama, Qwen2, Qwen3) in torch, with the two scorer
operations of creditflow: LAPO row scores (docs/method.md §2.1) and AttnSR step graphs (docs/method.md §3.1).

Guarantees:
- The arithmetic is the one of the Go reference model (scorer/cpumodel): RMSNorm with the weight
  applied after normalization, rotate-half RoPE with float32 inverse frequencies (default,
  linear and llama3 scaling), grouped-query attention, SwiGLU, optional q/k/v(/o) biases
  (Qwen2, Llama attention_bias), per-head q/k RMSNorm before RoPE (Qwen3), tied or untied
  embeddings. In float32 on CPU it agrees with the Go reference to float32 rounding.
- score_rows never pads: rows are merged into a radix tree over their full token
  sequences; every edge is forwarded once on top of its parent's key/value cache, so a
  prefix shared by several rows is computed once. Usage reports the tokens forwarded
  and the tokens a row-by-row computation would forward.
- step_graphs computes attention probabilities in query blocks of QUERY_BLOCK tokens:
  it holds O(QUERY_BLOCK x N) probabilities per head, never an N x N matrix, and sums them
  in float64.
"""

import math
import os

import torch
import torch.nn.functional as F

from . import attention
from . import safetensors as st
from .cache import Cache
from .config import (ARCHITECTURES, Config, InputError, ModelError, dtype_from_name,  # noqa: F401
                     find_placeholder, read_config, tensor_names)
from .graphs import QUERY_BLOCK, _StepGraphs  # noqa: F401
from .padded import _PaddedScoring
from .rowrun import Counts, _PlanRunner  # noqa: F401
from .scoring import Usage, _Node, _RowScoring  # noqa: F401

# Model work runs without autograd bookkeeping (torch.inference_mode where torch has it).
inference = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad



class Model(_RowScoring, _PlanRunner, _PaddedScoring, _StepGraphs):
    """A loaded network on one device in one dtype. Calls are not thread-safe on a
    shared device stream; the server serializes them."""

    def __init__(self, cfg, get, device="cpu", dtype=torch.float32, name="", placeholder=None):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.name, self.placeholder = name, list(placeholder or [])
        names = tensor_names(cfg)
        w = {}
        for n, shape in names.items():
            w[n] = get(n, shape)
        self.embed = w["model.embed_tokens.weight"]
        self.norm = w["model.norm.weight"]
        self.lm_head = self.embed if cfg.tie_embeddings else w["lm_head.weight"]
        self.layer_w = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            L = {k[len(p):]: v for k, v in w.items() if k.startswith(p)}
            self.layer_w.append(L)
        half = cfg.head_dim // 2
        self.inv_freq = cfg.inv_freq.to(self.device)
        self._half = half
        # Fused attention kernels on accelerators; the float32 reference path elsewhere
        # (set_attention chooses either on any device).
        self.use_sdpa = attention.HAS_SDPA and self.device.type == "cuda"
        # How score_rows shares prefixes (see there). The walk does the least arithmetic and
        # is bitwise equal to row-by-row scoring on CPU; tree packing makes fewer, larger
        # calls of at most pack_tokens tokens, which keeps an accelerator busy.
        self.packing = "tree" if self.device.type == "cuda" else "walk"
        self.pack_tokens = 4096
        self.counts = None  # a rowrun.Counts to count the device's work (cfpod.bench)
        self._head32 = self._head32_of = None

    def set_attention(self, kind):
        """kind "sdpa": torch's scaled_dot_product_attention (grouped heads through enable_gqa,
        an edge on a cached prefix with the lower-right causal bias, packs with their mask;
        attention.py), on any device; "reference": float32 scores and softmax in query
        blocks, the Go reference's arithmetic."""
        if kind not in ("sdpa", "reference"):
            raise ValueError(f"attention {kind!r} is not supported (want sdpa or reference)")
        if kind == "sdpa" and not attention.HAS_SDPA:
            raise ValueError(f"attention sdpa: torch {torch.__version__} has no scaled_dot_product_attention")
        self.use_sdpa = kind == "sdpa"

    @classmethod
    def load(cls, folder, device="cpu", dtype=torch.float32, placeholder_ids=None, name=None,
             max_context=None):
        """Reads a Hugging Face model folder: config.json plus *.safetensors (F32, F16 or
        BF16; no index file needed). max_context, when positive and below the model's,
        caps the context (rows are cut from the left to fit it, as the Go scorer's
        WithMaxContext does)."""
        cfg = read_config(folder)
        if max_context and 0 < max_context < cfg.max_context:
            cfg.max_context = int(max_context)
        ts = None
        try:
            ts = st.TensorSet(folder)
            if not cfg.tie_embeddings and not ts.has("lm_head.weight"):
                raise ModelError('tensor "lm_head.weight" is missing and config says '
                                 "tie_word_embeddings=false")
            m = cls(cfg, lambda n, s: ts.load(n, s, dtype=dtype, device=device), device, dtype)
        except ModelError:
            raise
        except (ValueError, OSError) as e:  # SafetensorsError is a ValueError
            raise ModelError(f"model {folder}: {e}") from None
        finally:
            if ts is not None:
                ts.close()
        m.name = name or os.path.basename(os.path.abspath(folder))
        m.placeholder = list(placeholder_ids) if placeholder_ids is not None else (find_placeholder(folder) or [])
        for t in m.placeholder:
            if not 0 <= t < cfg.vocab:
                raise ModelError(f"model {folder}: placeholder id {t} outside the vocabulary [0, {cfg.vocab})")
        return m

    @classmethod
    def random(cls, cfg, seed=0, device="cpu", dtype=torch.float32, name="random", on_device=False):
        """A randomly initialized model (for benchmarks and checks; no download needed).
        The weights are drawn on the CPU (the same on every device for a seed), or with
        on_device on the device itself (a 7B-shaped model in seconds, not minutes; other
        numbers than the CPU's)."""
        gdev = torch.device(device) if on_device else torch.device("cpu")
        g = torch.Generator(device=gdev).manual_seed(seed)

        def get(n, shape):
            r = torch.rand(shape, generator=g, device=gdev) * 2 - 1
            if n.endswith("norm.weight"):
                t = 1 + 0.1 * r
            elif n.endswith(".bias"):
                t = 0.05 * r
            else:
                a = 1.0 if "embed" in n else math.sqrt(3.0 / shape[-1])
                t = a * r
            return t.to(device=device, dtype=dtype)
        return cls(cfg, get, device, dtype, name)

    def head32(self):
        """The LM head in float32 (log-probabilities are computed in float32 whatever the
        model's dtype): the head itself in float32, else a float32 copy made once (vocab x
        hidden x 4 bytes: 2.2 GB at Qwen2.5-7B's shape)."""
        if self.lm_head.dtype == torch.float32:
            return self.lm_head
        if self._head32_of is not self.lm_head:
            self._head32, self._head32_of = self.lm_head.float(), self.lm_head
        return self._head32

    def info(self):
        c = self.cfg
        return {"name": self.name, "architecture": c.architecture, "layers": c.layers,
                "vocab_size": c.vocab, "max_context": c.max_context,
                "placeholder_ids": list(self.placeholder)}

    # ----- the network ---------------------------------------------------------------

    def _rms(self, x, w):
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        return w * (xf * r).to(self.dtype)

    def _rope_tables(self, pos):
        ang = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
        cos = torch.cos(ang.double()).to(self.dtype)
        sin = torch.sin(ang.double()).to(self.dtype)
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)

    def _rope(self, x, cos, sin):
        h = self._half
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def _qkv(self, W, x, cos, sin):
        """Queries [n, Hq, D], keys and values [n, Hkv, D] of layer weights W for the hidden
        states x [n, hidden]: the input norm, the projections (biases where the checkpoint has
        them), q/k norms (Qwen3) and RoPE on q and k."""
        c = self.cfg
        h = self._rms(x, W["input_layernorm.weight"])
        n = h.shape[0]
        k = F.linear(h, W["self_attn.k_proj.weight"], W.get("self_attn.k_proj.bias")).view(n, c.kv_heads, c.head_dim)
        v = F.linear(h, W["self_attn.v_proj.weight"], W.get("self_attn.v_proj.bias")).view(n, c.kv_heads, c.head_dim)
        q = F.linear(h, W["self_attn.q_proj.weight"], W.get("self_attn.q_proj.bias")).view(n, c.heads, c.head_dim)
        if c.qk_norm:
            q = self._rms(q, W["self_attn.q_norm.weight"])
            k = self._rms(k, W["self_attn.k_norm.weight"])
        return self._rope(q, cos, sin), self._rope(k, cos, sin), v

    def _attend(self, q, K, V, causal=False, mask=None, mask_from=0):
        """Attention of queries q [T, Hq, D] over keys and values [Hkv, S, D] (attention.attend):
        causal (the queries are the last T of the S positions) or the keys mask [T, S] allows
        (with mask_from: keys [0, mask_from) visible to all, mask over the rest)."""
        return attention.attend(q, K, V, causal=causal, mask=mask, use_sdpa=self.use_sdpa, mask_from=mask_from)

    @inference()
    def forward(self, cache, toks, out_pos=None, layers=None, on_q=None):
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
        cos, sin = self._rope_tables(pos)
        x = self.embed[toks]
        qpos = pos
        for li in range(nl):
            W = self.layer_w[li]
            q, k, v = self._qkv(W, x, cos, sin)
            cache.k[li][:, pos0:pos0 + T] = k.permute(1, 0, 2)
            cache.v[li][:, pos0:pos0 + T] = v.permute(1, 0, 2)
            if on_q is not None:
                on_q(li, q, cache)
                if li == nl - 1 and out_pos is None:
                    return None
            if li == c.layers - 1 and on_q is None and out_pos is None:
                break  # only the cache was wanted
            if li == c.layers - 1 and on_q is None:
                # Last layer: keys and values of every position are cached, but only the
                # wanted positions need the rest of the layer.
                x, q, qpos, cos, sin = x[out_pos], q[out_pos], pos[out_pos], cos[out_pos], sin[out_pos]
                out_pos = torch.arange(x.shape[0], device=self.device)
            if q.shape[0] == T:  # every position of the chunk: causal, lower-right aligned
                a = self._attend(q, cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T], causal=True)
            else:  # the wanted positions only
                keys = torch.arange(pos0 + T, device=self.device)
                a = self._attend(q, cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T],
                                 mask=keys[None, :] <= qpos[:, None])
            x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
            h = self._rms(x, W["post_attention_layernorm.weight"])
            gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
            up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))
        if out_pos is None:
            return None
        return self._rms(x[out_pos], self.norm)
