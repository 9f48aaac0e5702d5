"""A compact Llama-family decoder (Llama, Qwen2, Qwen3) in torch, with the two scorer
operations of creditflow: LAPO row scores (docs/method.md §2.1) and AttnSR step graphs (docs/method.md §3.1).

Guarantees:
- The arithmetic is the one of the Go reference model (gpu/model): RMSNorm with the weight
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

import json
import math
import os

import torch
import torch.nn.functional as F

from . import safetensors as st

QUERY_BLOCK = 128

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class ModelError(ValueError):
    """The checkpoint cannot be used; the message names the field, file or tensor."""


class InputError(ValueError):
    """The input of a scoring call is invalid; retrying the same input cannot help."""


def dtype_from_name(name):
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in names:
        raise ValueError(f"dtype {name!r} is not supported (want float32, bfloat16 or float16)")
    return names[name]


class Config:
    """The part of a Hugging Face config.json the network needs, validated as the Go
    reference validates it."""

    def __init__(self, h):
        arch = h.get("architectures")
        if not isinstance(arch, list) or len(arch) != 1:
            raise ModelError(f'field "architectures" must name exactly one architecture, got {arch!r}')
        self.architecture = arch[0]
        if self.architecture not in ARCHITECTURES:
            raise ModelError(f'field "architectures": {self.architecture!r} is not supported '
                             "(want LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM)")
        act = h.get("hidden_act") or "silu"
        if act != "silu":
            raise ModelError(f'field "hidden_act": {act!r} is not supported (want silu)')
        g = lambda k, d=0: h.get(k) if h.get(k) is not None else d  # noqa: E731
        self.hidden = g("hidden_size")
        self.layers = g("num_hidden_layers")
        self.heads = g("num_attention_heads")
        self.kv_heads = g("num_key_value_heads", self.heads)
        self.head_dim = self.hidden // self.heads if self.heads else 0
        if h.get("head_dim"):
            self.head_dim = h["head_dim"]
        self.intermediate = g("intermediate_size")
        self.vocab = g("vocab_size")
        self.max_positions = g("max_position_embeddings")
        self.rms_norm_eps = float(g("rms_norm_eps", 1e-6))
        self.rope_theta = float(g("rope_theta", 10000.0))
        self.tie_embeddings = bool(g("tie_word_embeddings", True))
        self.mlp_bias = bool(h.get("mlp_bias", False))
        self.attention_bias = False  # q, k, v and o biases
        self.qkv_bias = False        # q, k, v biases only (Qwen2)
        self.qk_norm = False         # Qwen3
        if self.architecture == "LlamaForCausalLM":
            self.attention_bias = bool(h.get("attention_bias", False))
        elif self.architecture == "Qwen2ForCausalLM":
            self.qkv_bias = True
        else:
            self.attention_bias = bool(h.get("attention_bias", False))
            self.qk_norm = True
        scaling = h.get("rope_scaling")
        if scaling is None and isinstance(h.get("rope_parameters"), dict):
            scaling = h["rope_parameters"]
            if h.get("rope_theta") is None and isinstance(scaling.get("rope_theta"), (int, float)):
                self.rope_theta = float(scaling["rope_theta"])
        for name, v in (("hidden_size", self.hidden), ("num_hidden_layers", self.layers),
                        ("num_attention_heads", self.heads), ("num_key_value_heads", self.kv_heads),
                        ("head_dim", self.head_dim), ("intermediate_size", self.intermediate),
                        ("vocab_size", self.vocab), ("max_position_embeddings", self.max_positions)):
            if not isinstance(v, int) or v <= 0:
                raise ModelError(f"field {name!r} must be a positive integer, got {v!r}")
        if self.heads % self.kv_heads:
            raise ModelError(f'field "num_attention_heads" ({self.heads}) must be a multiple of '
                             f'"num_key_value_heads" ({self.kv_heads})')
        if self.head_dim % 2:
            raise ModelError(f'field "head_dim" must be even for rotary embeddings, got {self.head_dim}')
        if not self.rope_theta > 0:
            raise ModelError(f'field "rope_theta" must be positive, got {self.rope_theta}')
        self.max_context = self.max_positions
        sw = h.get("sliding_window")
        if h.get("use_sliding_window") and isinstance(sw, int) and 0 < sw < self.max_context:
            self.max_context = sw  # exact: attention never reaches past the window
        self.inv_freq = self._rope(scaling)

    def _rope(self, scaling):
        d = self.head_dim
        inv = []
        for i in range(d // 2):
            e = float(torch.tensor(2 * i, dtype=torch.float32) / torch.tensor(d, dtype=torch.float32))
            inv.append(1.0 / math.pow(self.rope_theta, e))
        inv = torch.tensor(inv, dtype=torch.float32)
        typ = ""
        if isinstance(scaling, dict):
            typ = scaling.get("rope_type") or scaling.get("type") or ""

        def num(k):
            v = scaling.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ModelError(f'field "rope_scaling": {k!r} must be a number for rope_type {typ!r}')
            return float(v)

        if typ in ("", "default"):
            return inv
        if typ == "linear":
            f = num("factor")
            return torch.tensor([float(x) / f for x in inv.tolist()], dtype=torch.float32)
        if typ == "llama3":
            factor, lo, hi, old = num("factor"), num("low_freq_factor"), num("high_freq_factor"), \
                num("original_max_position_embeddings")
            lo_wave, hi_wave = old / lo, old / hi
            out = []
            for f in inv.tolist():
                wave = 2 * math.pi / f
                v = f / factor if wave > lo_wave else f
                if not wave < hi_wave and not wave > lo_wave:
                    s = (old / wave - lo) / (hi - lo)
                    v = (1 - s) * v / factor + s * v
                out.append(v)
            return torch.tensor(out, dtype=torch.float32)
        raise ModelError(f'field "rope_scaling": rope_type {typ!r} is not supported '
                         "(want default, linear or llama3)")

    def to_hf(self):
        m = {"architectures": [self.architecture], "hidden_size": self.hidden,
             "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
             "num_key_value_heads": self.kv_heads, "head_dim": self.head_dim,
             "intermediate_size": self.intermediate, "vocab_size": self.vocab,
             "max_position_embeddings": self.max_positions, "rms_norm_eps": self.rms_norm_eps,
             "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_embeddings,
             "hidden_act": "silu"}
        if self.architecture == "LlamaForCausalLM":
            m.update(model_type="llama", attention_bias=self.attention_bias, mlp_bias=self.mlp_bias)
        elif self.architecture == "Qwen2ForCausalLM":
            m.update(model_type="qwen2")
        else:
            m.update(model_type="qwen3", attention_bias=self.attention_bias)
        return m


def read_config(folder):
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            h = json.load(f)
    except OSError as e:
        raise ModelError(f"reading model config: {e} (a model folder needs config.json and "
                         "*.safetensors)") from None
    except json.JSONDecodeError as e:
        raise ModelError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(h, dict):
        raise ModelError(f"{path}: not a JSON object")
    try:
        return Config(h)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None


def find_placeholder(folder):
    """The id of "[DELETE]" as one token in tokenizer.json, or None."""
    try:
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            t = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    for a in t.get("added_tokens") or []:
        if a.get("content") == "[DELETE]":
            return [int(a["id"])]
    vocab = (t.get("model") or {}).get("vocab")
    if isinstance(vocab, dict) and "[DELETE]" in vocab:
        return [int(vocab["[DELETE]"])]
    return None


def tensor_names(cfg):
    """{name: shape} of every tensor the config needs (lm_head only when untied)."""
    h, d = cfg.hidden, cfg.head_dim
    out = {"model.embed_tokens.weight": [cfg.vocab, h], "model.norm.weight": [h]}
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = [cfg.vocab, h]
    qkv_bias = cfg.attention_bias or cfg.qkv_bias
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = [h]
        out[p + "post_attention_layernorm.weight"] = [h]
        for name, o, n, b in (("self_attn.q_proj", cfg.heads * d, h, qkv_bias),
                              ("self_attn.k_proj", cfg.kv_heads * d, h, qkv_bias),
                              ("self_attn.v_proj", cfg.kv_heads * d, h, qkv_bias),
                              ("self_attn.o_proj", h, cfg.heads * d, cfg.attention_bias),
                              ("mlp.gate_proj", cfg.intermediate, h, cfg.mlp_bias),
                              ("mlp.up_proj", cfg.intermediate, h, cfg.mlp_bias),
                              ("mlp.down_proj", h, cfg.intermediate, cfg.mlp_bias)):
            out[p + name + ".weight"] = [o, n]
            if b:
                out[p + name + ".bias"] = [o]
        if cfg.qk_norm:
            out[p + "self_attn.q_norm.weight"] = [d]
            out[p + "self_attn.k_norm.weight"] = [d]
    return out


class Cache:
    """Keys and values of the positions forwarded so far: per layer [kv_heads, cap, head_dim].
    Truncating back to a shorter prefix is free."""

    def __init__(self, model, cap, layers):
        c = model.cfg
        self.k = [torch.empty(c.kv_heads, cap, c.head_dim, dtype=model.dtype, device=model.device)
                  for _ in range(layers)]
        self.v = [torch.empty_like(x) for x in self.k]
        self.n = 0

    def ensure(self, n):
        cap = self.k[0].shape[1] if self.k else 0
        if n <= cap:
            return
        new = max(n, cap + cap // 2)
        for lst in (self.k, self.v):
            for i, t in enumerate(lst):
                g = torch.empty(t.shape[0], new, t.shape[2], dtype=t.dtype, device=t.device)
                g[:, :self.n] = t[:, :self.n]
                lst[i] = g


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


class Model:
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
        # Fused attention kernels on accelerators; the float32 reference path elsewhere.
        self.use_sdpa = _HAS_SDPA and self.device.type == "cuda"
        # How score_rows shares prefixes (see there). The walk does the least arithmetic;
        # tree packing makes fewer, larger calls (cfpod.bench measures both).
        self.packing = "walk"
        self.pack_tokens = 4096

    @classmethod
    def load(cls, folder, device="cpu", dtype=torch.float32, placeholder_ids=None, name=None):
        """Reads a Hugging Face model folder: config.json plus *.safetensors (F32, F16 or
        BF16; no index file needed)."""
        cfg = read_config(folder)
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
    def random(cls, cfg, seed=0, device="cpu", dtype=torch.float32, name="random"):
        """A randomly initialized model (for benchmarks and checks; no download needed)."""
        g = torch.Generator().manual_seed(seed)

        def get(n, shape):
            if n.endswith("norm.weight"):
                t = 1 + 0.1 * (torch.rand(shape, generator=g) * 2 - 1)
            elif n.endswith(".bias"):
                t = 0.05 * (torch.rand(shape, generator=g) * 2 - 1)
            else:
                a = 1.0 if "embed" in n else math.sqrt(3.0 / shape[-1])
                t = a * (torch.rand(shape, generator=g) * 2 - 1)
            return t.to(device=device, dtype=dtype)
        return cls(cfg, get, device, dtype, name)

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

    def _attend(self, q, K, V, allowed, causal0=False):
        """Attention of queries q [T, Hq, D] over keys and values [Hkv, S, D]; returns
        [T, Hq*D]. allowed(s, e) gives the bool mask [e-s, S] of the keys queries s..e-1 may
        see; causal0: the queries are positions 0..S-1 of one sequence (plain causal)."""
        c = self.cfg
        T, S = q.shape[0], K.shape[1]
        group = c.heads // c.kv_heads
        scale = 1.0 / math.sqrt(c.head_dim)
        qh = q.permute(1, 0, 2)  # [Hq, T, D]
        if self.use_sdpa:
            Kx = K.repeat_interleave(group, 0) if group > 1 else K
            Vx = V.repeat_interleave(group, 0) if group > 1 else V
            if causal0:
                o = F.scaled_dot_product_attention(qh[None], Kx[None], Vx[None], is_causal=True)[0]
            else:
                # A masked call may fall back to a kernel that materializes the scores:
                # bound them to 2^27 values per chunk.
                step = max(1, (1 << 27) // max(S * c.heads, 1))
                outs = []
                for s in range(0, T, step):
                    e = min(T, s + step)
                    outs.append(F.scaled_dot_product_attention(qh[None, :, s:e], Kx[None], Vx[None],
                                                               attn_mask=allowed(s, e)[None, None])[0])
                o = torch.cat(outs, 1)
            return o.permute(1, 0, 2).reshape(T, -1)
        # Reference path: float32 scores and softmax, query blocks bound the memory.
        qg = qh.reshape(c.kv_heads, group, T, c.head_dim)
        out = torch.empty(c.kv_heads, group, T, c.head_dim, dtype=self.dtype, device=q.device)
        step = max(1, (1 << 24) // max(S * c.heads, 1))
        Kt = K.float().transpose(1, 2)[:, None]  # [Hkv, 1, D, S]
        Vf = V.float()[:, None]
        for s in range(0, T, step):
            e = min(T, s + step)
            sc = torch.matmul(qg[:, :, s:e].float(), Kt) * scale  # [Hkv, g, b, S]
            sc.masked_fill_(~allowed(s, e), float("-inf"))
            p = torch.softmax(sc, -1)
            out[:, :, s:e] = torch.matmul(p, Vf).to(self.dtype)
        return out.reshape(c.heads, T, c.head_dim).permute(1, 0, 2).reshape(T, -1)

    def _causal(self, qpos, S):
        keys = torch.arange(S, device=self.device)
        return lambda s, e: keys[None, :] <= qpos[s:e, None]

    @torch.no_grad()
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
            h = self._rms(x, W["input_layernorm.weight"])
            n = h.shape[0]
            k = F.linear(h, W["self_attn.k_proj.weight"], W.get("self_attn.k_proj.bias")).view(n, c.kv_heads, c.head_dim)
            v = F.linear(h, W["self_attn.v_proj.weight"], W.get("self_attn.v_proj.bias")).view(n, c.kv_heads, c.head_dim)
            q = F.linear(h, W["self_attn.q_proj.weight"], W.get("self_attn.q_proj.bias")).view(n, c.heads, c.head_dim)
            if c.qk_norm:
                q = self._rms(q, W["self_attn.q_norm.weight"])
                k = self._rms(k, W["self_attn.k_norm.weight"])
            q = self._rope(q, cos, sin)
            k = self._rope(k, cos, sin)
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
            a = self._attend(q, cache.k[li][:, :pos0 + T], cache.v[li][:, :pos0 + T],
                             self._causal(qpos, pos0 + T), pos0 == 0 and q.shape[0] == T)
            x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
            h = self._rms(x, W["post_attention_layernorm.weight"])
            gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
            up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))
        if out_pos is None:
            return None
        return self._rms(x[out_pos], self.norm)

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
        qidx = kidx

        def allowed(s, e):
            qi = qidx[s:e]
            return anc_t[node_t[qi]][:, node_t] & (kidx[None, :] <= qi[:, None])
        for li in range(c.layers):
            W = self.layer_w[li]
            h = self._rms(x, W["input_layernorm.weight"])
            n = h.shape[0]
            k = F.linear(h, W["self_attn.k_proj.weight"], W.get("self_attn.k_proj.bias")).view(n, c.kv_heads, c.head_dim)
            v = F.linear(h, W["self_attn.v_proj.weight"], W.get("self_attn.v_proj.bias")).view(n, c.kv_heads, c.head_dim)
            q = F.linear(h, W["self_attn.q_proj.weight"], W.get("self_attn.q_proj.bias")).view(n, c.heads, c.head_dim)
            if c.qk_norm:
                q = self._rms(q, W["self_attn.q_norm.weight"])
                k = self._rms(k, W["self_attn.k_norm.weight"])
            q = self._rope(q, cos, sin)
            k = self._rope(k, cos, sin)
            if li == c.layers - 1:  # the last layer only for the wanted positions
                x, q, qidx = x[out_t], q[out_t], out_t
            a = self._attend(q, k.permute(1, 0, 2), v.permute(1, 0, 2), allowed)
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

    # ----- AttnSR step graphs -------------------------------------------------------

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

        cache = Cache(self, N, deepest + 1)
        toks = torch.tensor(tokens, dtype=torch.long, device=dev)
        self.forward(cache, toks, layers=deepest + 1, on_q=on_q)
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

        cache = Cache(self, N, max(layers) + 1)
        self.forward(cache, torch.tensor(tokens, dtype=torch.long, device=self.device),
                     layers=max(layers) + 1, on_q=on_q)
        return [(l, got[l][0], got[l][1]) for l in layers]
