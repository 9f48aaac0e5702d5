"""A small causal language model in plain PyTorch, as a policy: load and save Hugging Face
checkpoint folders, sample actions, compute token log-probabilities (docs/learn.md).

The network is ``LlamaForCausalLM`` (RMSNorm, rotate_half RoPE, SwiGLU, untied head, grouped
query attention) with Hugging Face's parameter names, so a folder written by `save` is read by
creditflow's scorers (Go and the GPU pod) like any checkpoint, and the built-in tiny model's
folder is read here. Its arithmetic is creditflow.llama, the forward the GPU scorer pod runs
too. Float32 on the CPU; deterministic for a fixed seed and thread count.

Needs torch (Debian: python3-torch); no numpy, no transformers.
"""

import ctypes
import json
import os
import struct

import torch
import torch.nn as nn

from . import llama as L

__all__ = ["Llama", "load", "save", "encode", "decode", "sample_actions", "token_logprobs",
           "read_safetensors", "write_safetensors", "BYTE_VOCAB", "PAD"]

BYTE_VOCAB = 256        # ids 0..255 are bytes; 256 <bos>, 257 <eos>, 258 <pad>, 259 [DELETE]
PAD = 258


class _Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


def _linear(i, o):
    return nn.Linear(i, o, bias=False)


class _Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.q_proj = _linear(s.hidden, s.heads * s.head_dim)
        self.k_proj = _linear(s.hidden, s.kv_heads * s.head_dim)
        self.v_proj = _linear(s.hidden, s.kv_heads * s.head_dim)
        self.o_proj = _linear(s.heads * s.head_dim, s.hidden)


class _MLP(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.gate_proj = _linear(s.hidden, s.intermediate)
        self.up_proj = _linear(s.hidden, s.intermediate)
        self.down_proj = _linear(s.intermediate, s.hidden)


class _Layer(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.input_layernorm = _Norm(s.hidden)
        self.self_attn = _Attention(s)
        self.post_attention_layernorm = _Norm(s.hidden)
        self.mlp = _MLP(s)


class _Inner(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList([_Layer(s) for _ in range(s.layers)])
        self.norm = _Norm(s.hidden)


class Llama(nn.Module):
    """LlamaForCausalLM; forward(ids [B, N]) -> logits [B, N, vocab] (float32).

    The module holds the parameters under Hugging Face's names (for state_dict, optimizers
    and checkpoints); the network it computes is creditflow.llama's, the one the GPU scorer
    pod runs, over these parameters (gradients flow through it)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.shape = L.Shape(c)
        self.model = _Inner(self.shape)
        self.lm_head = _linear(self.shape.hidden, self.shape.vocab)

    def net(self):
        """The network over this module's parameters (a creditflow.llama.Llama)."""
        m = self.model
        return L.Llama(self.shape, m.embed_tokens.weight, m.norm.weight, self.lm_head.weight,
                       [dict(layer.named_parameters()) for layer in m.layers])

    def forward(self, ids, pos=None, allowed=None, cache=None):
        """Logits of every position. Without `pos` and `allowed`: one causal sequence per row
        from position 0. With them (incremental decoding): `pos` [B, N] are the rows'
        positions, `allowed` [B, N, K] (bool) the keys each query sees among the K = cached + N,
        `cache` the per-layer (keys, values) [B, cached, kv_heads, head_dim] of earlier calls
        (None for none); returns (logits, cache)."""
        b, n = ids.shape
        if pos is None:
            pos = torch.arange(n).expand(b, n)
            allowed = torch.ones(n, n, dtype=torch.bool).tril().expand(b, n, n)
        new = []

        def attend(li, q, k, v):
            if cache is not None and cache[li] is not None:
                k, v = torch.cat((cache[li][0], k), dim=1), torch.cat((cache[li][1], v), dim=1)
            new.append((k, v))
            return L.attention(q, k, v, allowed)

        net = self.net()
        logits = net.logits(net.final_norm(net.decode(ids, pos, attend)))
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
    logits, cache = model(ids, pos=pos, allowed=allowed, cache=[None] * len(model.model.layers))
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
        logits, cache = model(tok[:, None], pos=(lens + t)[:, None], allowed=keyok[:, None, :], cache=cache)
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
