"""Checkpoint configuration: the Hugging Face config.json of a Llama-family model read
into a Config, the tensors such a model must hold, and the errors of loading and scoring.

Guarantees:
- read_config accepts only the architectures in ARCHITECTURES and raises ModelError
  naming the field it cannot use: another model_type, a RoPE type other than default,
  linear and llama3, a partial_rotary_factor, sliding-window attention on any layer, a
  quantization_config (as scorer/cpumodel's config.go).
- config.json is read as transformers 4.x writes it (rope_theta, rope_scaling) and as
  transformers 5 does (rope_parameters holding rope_theta, layer_types); a missing
  tie_word_embeddings means untied, transformers' default.
"""

import json
import math
import os

import torch

from creditflow.llama import rope_inv_freq

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MODEL_TYPES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


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
        want = MODEL_TYPES[self.architecture]
        if h.get("model_type") and h["model_type"] != want:
            raise ModelError(f'field "model_type": {h["model_type"]!r} is not supported with '
                             f"{self.architecture} (want {want!r})")
        if h.get("quantization_config") is not None:
            raise ModelError('field "quantization_config": quantized checkpoints are not supported '
                             "(the scorers read float32, float16 or bfloat16 weights)")
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
        # LlamaConfig, Qwen2Config and Qwen3Config default to untied embeddings.
        self.tie_embeddings = bool(g("tie_word_embeddings", False))
        self.mlp_bias = False        # Llama's mlp_bias; Qwen2's and Qwen3's MLPs have none (as in transformers)
        self.attention_bias = False  # q, k, v and o biases
        self.qkv_bias = False        # q, k, v biases only (Qwen2)
        self.qk_norm = False         # Qwen3
        if self.architecture == "LlamaForCausalLM":
            self.attention_bias = bool(h.get("attention_bias", False))
            self.mlp_bias = bool(h.get("mlp_bias", False))
        elif self.architecture == "Qwen2ForCausalLM":
            self.qkv_bias = True
        else:
            self.attention_bias = bool(h.get("attention_bias", False))
            self.qk_norm = True
        # RoPE: transformers 4 writes rope_theta and rope_scaling, transformers 5
        # rope_parameters (with rope_theta inside).
        scaling, rope_field = h.get("rope_scaling"), "rope_scaling"
        if scaling is None and isinstance(h.get("rope_parameters"), dict):
            scaling, rope_field = h["rope_parameters"], "rope_parameters"
            for k, v in scaling.items():
                if isinstance(v, dict):
                    raise ModelError(f'field "rope_parameters": per-layer-type parameters ({k!r}) '
                                     "are not supported")
            if h.get("rope_theta") is None and isinstance(scaling.get("rope_theta"), (int, float)):
                self.rope_theta = float(scaling["rope_theta"])
        prf = h.get("partial_rotary_factor")
        if isinstance(scaling, dict) and scaling.get("partial_rotary_factor") is not None:
            prf = scaling["partial_rotary_factor"]
        if prf is not None and prf != 1:
            raise ModelError(f'field "partial_rotary_factor": {prf!r} is not supported '
                             "(rotary embeddings on the whole head only)")
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
        self._check_full_attention(h)
        self.inv_freq = self._rope(scaling, rope_field)

    def _check_full_attention(self, h):
        """Refuses sliding-window attention on any layer (the scorers attend over the whole
        context), as the Go scorer does: transformers 5 writes layer_types; 4.x-era Qwen2 and
        Qwen3 configs slide layers from max_window_layers on (default 28) when
        use_sliding_window is set, over sliding_window tokens (default 4096). A window that
        covers every position changes nothing and is accepted."""
        if "sliding_window" in h:
            window = h["sliding_window"]
            if window is not None and (not isinstance(window, int) or isinstance(window, bool)):
                raise ModelError(f'field "sliding_window" must be an integer or null, got {window!r}')
        else:
            window = None if self.architecture == "LlamaForCausalLM" else 4096
        covers = window is None or window >= self.max_positions
        types = h.get("layer_types")
        for i, lt in enumerate(types or []):
            if lt == "full_attention":
                continue
            if lt == "sliding_attention":
                if not covers:
                    raise ModelError(f'field "layer_types": layer {i} is sliding_attention over {window} '
                                     "tokens; sliding-window attention is not supported")
                continue
            raise ModelError(f'field "layer_types": layer {i} is {lt!r}; only full_attention is supported')
        if types is not None or not h.get("use_sliding_window") or self.architecture == "LlamaForCausalLM" \
                or covers:
            return
        start = h.get("max_window_layers")
        start = 28 if start is None else start
        if start < self.layers:
            raise ModelError(f'field "use_sliding_window": layers {start} and up attend over a sliding '
                             f"window of {window} tokens (sliding_window, max_window_layers); "
                             "sliding-window attention is not supported")

    def _rope(self, scaling, field="rope_scaling"):
        inv = rope_inv_freq(self.head_dim, self.rope_theta)
        typ = ""
        if isinstance(scaling, dict):
            typ = scaling.get("rope_type") or scaling.get("type") or ""

        def num(k):
            v = scaling.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ModelError(f'field "{field}": {k!r} must be a number for rope_type {typ!r}')
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
        raise ModelError(f'field "{field}": rope_type {typ!r} is not supported '
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

