"""A small causal language model in plain PyTorch, as a policy: load and save Hugging Face
checkpoint folders, sample actions, compute token log-probabilities (docs/learn.md).

The network is ``LlamaForCausalLM`` (RMSNorm, rotate_half RoPE, SwiGLU, untied head, grouped
query attention) with Hugging Face's parameter names, so a folder written by `save` is read by
creditflow's scorers (Go and the GPU pod) like any checkpoint, and the built-in tiny model's
folder is read here. Float32 on the CPU; deterministic for a fixed seed and thread count.

Needs torch (Debian: python3-torch); no numpy, no transformers.
"""

import ctypes
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Llama", "load", "save", "encode", "decode", "sample_actions", "token_logprobs",
           "read_safetensors", "write_safetensors", "BYTE_VOCAB", "PAD"]

BYTE_VOCAB = 256        # ids 0..255 are bytes; 256 <bos>, 257 <eos>, 258 <pad>, 259 [DELETE]
PAD = 258


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rot(t):
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.nh, self.nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or h // self.nh
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)

    def forward(self, x, cos, sin, mask, kv=None):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.nkv, self.hd).transpose(1, 2)
        q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
        if kv is not None:  # cached keys and values of the earlier positions
            k, v = torch.cat((kv[0], k), dim=2), torch.cat((kv[1], v), dim=2)
        new = (k, v)
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + mask, dim=-1)
        return self.o_proj((a @ v).transpose(1, 2).reshape(b, n, self.nh * self.hd)), new


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask, kv=None):
        h, new = self.self_attn(self.input_layernorm(x), cos, sin, mask, kv)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), new


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    """LlamaForCausalLM; forward(ids [B, N]) -> logits [B, N, vocab] (float32)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        self.register_buffer("inv", 1.0 / (c.get("rope_theta", 10000.0) **
                                           (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)), persistent=False)

    def forward(self, ids, pos=None, mask=None, cache=None):
        """Logits of every position. Without `pos` and `mask`: one causal sequence per row
        from position 0. With them (incremental decoding): `pos` [B, N] are the rows'
        positions, `mask` [B, 1, N, K] the additive attention mask over the K = cached + N
        keys, `cache` the per-layer (keys, values) of earlier calls; returns (logits, cache)."""
        n = ids.shape[1]
        if pos is None:
            pos = torch.arange(n)[None]
            mask = torch.full((n, n), float("-inf")).triu(1)
        freqs = pos.float()[..., None] * self.inv
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(ids)
        new = []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, mask, None if cache is None else cache[i])
            new.append(kv)
        logits = self.lm_head(self.model.norm(x))
        return logits if cache is None else (logits, new)


# ----- checkpoints ----------------------------------------------------------------------------

_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def read_safetensors(path):
    """{name: tensor} from a .safetensors file (F32, F16, BF16; returned as float32)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt, size = _DTYPES[meta["dtype"]]
        a, b = meta["data_offsets"]
        t = torch.frombuffer(bytearray(body[a:b]), dtype=dt) if b > a else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(meta["shape"]).float()
    return out


def write_safetensors(path, tensors):
    """Writes {name: tensor} as float32 safetensors, names sorted (same tensors, same bytes)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        blob = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load(folder):
    """The model of a Hugging Face checkpoint folder (config.json, model.safetensors)."""
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    m = Llama(c)
    sd = read_safetensors(os.path.join(folder, "model.safetensors"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError("%s: missing %s, unexpected %s" % (folder, missing, unexpected))
    return m


def save(model, folder, extra_files=None):
    """Writes config.json, model.safetensors (and extra_files {name: text}) into `folder`,
    atomically per file: a reader sees the old or the new file, never half of one."""
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), dict(model.state_dict()))
    for name, text in [("config.json", json.dumps(model.c, indent=2) + "\n")] + sorted((extra_files or {}).items()):
        tmp = os.path.join(folder, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(folder, name))


# ----- text -----------------------------------------------------------------------------------

def encode(text):
    return list(text.encode("utf-8"))


def decode(ids):
    return bytes(i for i in ids if 0 <= i < BYTE_VOCAB).decode("utf-8", "replace")


# ----- acting and scoring ---------------------------------------------------------------------

@torch.no_grad()
def sample_actions(model, contexts, stops, max_tokens=40, temperature=1.0, generator=None):
    """Samples one action per context, token by token, from the policy at `temperature`
    (0: greedy). An action ends when its text ends with its stop string, when the policy
    writes a non-byte token (kept as the action's last token), or after `max_tokens`.
    Returns [(ids, logprobs)]: logprobs are log μ of each sampled token under the
    temperature-scaled distribution (greedy: under temperature 1).

    The contexts are left-padded into one batch and read once; each further token costs one
    step over the cached keys and values (positions and masks per row, so a row's logits
    are those of its own unpadded sequence)."""
    b = len(contexts)
    lens = torch.tensor([len(c) for c in contexts])
    L = int(lens.max())
    padn = L - lens
    ids = torch.full((b, L), PAD, dtype=torch.long)
    for i, c in enumerate(contexts):
        ids[i, L - len(c):] = torch.tensor(c, dtype=torch.long)
    j = torch.arange(L)
    pos = (j[None] - padn[:, None]).clamp(min=0)
    keyok = j[None] >= padn[:, None]                                   # [B, K]
    allowed = (j[None, :, None] >= j[None, None, :]) & keyok[:, None, :]  # causal, no padding keys
    allowed |= torch.eye(L, dtype=torch.bool)[None] & ~keyok[:, :, None]  # a padding row sees itself
    neg = float("-inf")
    mask = torch.zeros(b, 1, L, L).masked_fill(~allowed[:, None], neg)
    logits, cache = model(ids, pos=pos, mask=mask, cache=[None] * len(model.model.layers))
    last = logits[:, -1]
    out = [([], []) for _ in range(b)]
    live = torch.ones(b, dtype=torch.bool)
    for t in range(max_tokens):
        if temperature > 0:
            logp = torch.log_softmax(last / temperature, -1)
            tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        else:
            logp = torch.log_softmax(last, -1)
            tok = logp.argmax(-1)
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
        for i in range(b):
            if not live[i]:
                continue
            k = int(tok[i])
            out[i][0].append(k)
            out[i][1].append(float(lp[i]))
            if k >= BYTE_VOCAB or decode(out[i][0]).endswith(stops[i]):
                live[i] = False
        if not live.any() or t == max_tokens - 1:
            break
        keyok = torch.cat((keyok, torch.ones(b, 1, dtype=torch.bool)), dim=1)
        mask = torch.zeros(b, 1, 1, keyok.shape[1]).masked_fill(~keyok[:, None, None, :], neg)
        logits, cache = model(tok[:, None], pos=(lens + t)[:, None], mask=mask, cache=cache)
        last = logits[:, -1]
    return out


def token_logprobs(model, ids, temperature):
    """log π(token i | tokens < i) for i ≥ 1, [B, N-1], logits divided by `temperature`
    (a float or a [B] tensor), as docs/trainers.md's loss computes them."""
    logits = model(ids[:, :-1])
    if torch.is_tensor(temperature):
        logits = logits / temperature.view(-1, 1, 1)
    else:
        logits = logits / temperature
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
