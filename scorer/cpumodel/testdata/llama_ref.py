#!/usr/bin/env python3
"""Independent PyTorch implementation of the Llama-family forward pass that
package model implements, for cross-checking its numbers.

usage: llama_ref.py MODEL_DIR score     < rows.jsonl   (docs/offline.md lines)
       llama_ref.py MODEL_DIR entropy   < rows.jsonl   (creditflow score --statistic entropy)
       llama_ref.py MODEL_DIR kl        < rows.jsonl   (creditflow score --statistic kl)
       llama_ref.py MODEL_DIR attention < trajs.jsonl  (docs/offline.md lines, "layers" required)
       llama_ref.py --jobs < jobs.json
           jobs.json: [{"dir": MODEL_DIR, "mode": "score"|"attention", "lines": [obj...]}]
           writes a JSON array with one array of output objects per job
           (one process, so PyTorch is imported once).

It reads config.json and *.safetensors itself (header parsed by hand; F32,
F16, BF16), follows the Hugging Face modeling code (RMSNorm, rotate_half RoPE,
grouped-query attention, SwiGLU, Qwen2 q/k/v biases, Qwen3 q/k norms, tied or
untied head) in float32 and writes the same JSON Lines as the creditflow
commands. Default RoPE only.
"""
import glob
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def load_tensors(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(path, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        base = 8 + n
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            buf = bytearray(raw[base + b : base + en])
            t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
            out[name] = t.to(torch.float32)
    return out


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.arch = c["architectures"][0]
        self.h = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads") or self.nh
        self.hd = c.get("head_dim") or self.h // self.nh
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 10000.0)
        self.tied = c.get("tie_word_embeddings", True)
        self.w = load_tensors(d)
        if self.tied or "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    def rms(self, x, w):
        v = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(v + self.eps))

    def lin(self, name, x):
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y + b if b is not None else y

    def forward(self, ids):
        """Returns (final hidden states [N, h], attention probs per layer [nh, N, N])."""
        n = len(ids)
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).float() / self.hd))
        freqs = torch.outer(torch.arange(n).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()

        def rot(t):
            half = t.shape[-1] // 2
            return torch.cat((-t[..., half:], t[..., :half]), dim=-1)

        mask = torch.full((n, n), float("-inf")).triu(1)
        probs = []
        for l in range(self.layers):
            p = "model.layers.%d." % l
            xn = self.rms(x, self.w[p + "input_layernorm.weight"])
            q = self.lin(p + "self_attn.q_proj", xn).view(n, self.nh, self.hd).transpose(0, 1)
            k = self.lin(p + "self_attn.k_proj", xn).view(n, self.nkv, self.hd).transpose(0, 1)
            v = self.lin(p + "self_attn.v_proj", xn).view(n, self.nkv, self.hd).transpose(0, 1)
            if p + "self_attn.q_norm.weight" in self.w:
                q = self.rms(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.rms(k, self.w[p + "self_attn.k_norm.weight"])
            q = q * cos + rot(q) * sin
            k = k * cos + rot(k) * sin
            rep = self.nh // self.nkv
            k = k.repeat_interleave(rep, dim=0)
            v = v.repeat_interleave(rep, dim=0)
            s = q @ k.transpose(1, 2) / math.sqrt(self.hd) + mask
            a = torch.softmax(s, dim=-1, dtype=torch.float32)
            probs.append(a)
            o = (a @ v).transpose(0, 1).reshape(n, self.nh * self.hd)
            x = x + self.lin(p + "self_attn.o_proj", o)
            xn = self.rms(x, self.w[p + "post_attention_layernorm.weight"])
            g = self.lin(p + "mlp.gate_proj", xn)
            u = self.lin(p + "mlp.up_proj", xn)
            x = x + self.lin(p + "mlp.down_proj", torch.nn.functional.silu(g) * u)
        return self.rms(x, self.w["model.norm.weight"]), probs


def score(m, line):
    ctx, tgt, (a, b) = line["context"], line["target"], line["span"]
    seq = ctx + tgt
    h, _ = m.forward(seq)
    logits = (h @ m.w["lm_head.weight"].T).double()
    lp = torch.log_softmax(logits, dim=-1)
    s = sum(lp[len(ctx) + k - 1, seq[len(ctx) + k]].item() for k in range(a, b))
    return {"score": s / (b - a)}


def span_logp(m, ctx, tgt, a, b, temp):
    """float64 log-distributions predicting tgt[a:b] after ctx, logits / temp."""
    h, _ = m.forward(ctx + tgt)
    logits = (h @ m.w["lm_head.weight"].T).double() / temp
    lp = torch.log_softmax(logits, dim=-1)
    return lp[len(ctx) + a - 1 : len(ctx) + b - 1]


def entropy(m, line):
    """Mean entropy (nats) of the distributions that predict target[a:b]."""
    a, b = line["span"]
    lp = span_logp(m, line["context"], line["target"], a, b, line.get("temperature") or 1.0)
    return {"score": (-(lp.exp() * lp).sum(-1)).mean().item()}


def kl(m, line):
    """Mean KL(p(.|context) || p(.|reference_context)) over the same positions."""
    a, b = line["span"]
    t = line.get("temperature") or 1.0
    lp = span_logp(m, line["context"], line["target"], a, b, t)
    lq = span_logp(m, line["reference_context"], line["target"], a, b, t)
    return {"score": (lp.exp() * (lp - lq)).sum(-1).mean().item()}


def attention(m, line):
    toks, steps = line["tokens"], line["steps"]
    _, probs = m.forward(toks)
    K = len(steps)
    out = []
    for l in line["layers"]:
        P = probs[l].double()
        aa = [[0.0] * K for _ in range(K)]
        ao = [[0.0] * K for _ in range(K)]
        for j, sj in enumerate(steps):
            a0, a1 = sj["action"]
            if a1 == a0:
                continue
            for k in range(j):
                b0, b1 = steps[k]["action"]
                aa[j][k] = P[:, a0:a1, b0:b1].sum().item() / ((a1 - a0) * m.nh)
                if steps[k].get("observation"):
                    o0, o1 = steps[k]["observation"]
                    ao[j][k] = P[:, a0:a1, o0:o1].sum().item() / ((a1 - a0) * m.nh)
        out.append({"layer": l, "aa": aa, "ao": ao})
    return {"layers": out}


def main():
    torch.set_num_threads(1)
    fns = {"score": score, "attention": attention, "entropy": entropy, "kl": kl}
    if sys.argv[1] == "--jobs":
        res = []
        for job in json.load(sys.stdin):
            m = Model(job["dir"])
            res.append([fns[job["mode"]](m, line) for line in job["lines"]])
        json.dump(res, sys.stdout)
        return
    m = Model(sys.argv[1])
    fn = fns[sys.argv[2]]
    for raw in sys.stdin:
        if raw.strip():
            print(json.dumps(fn(m, json.loads(raw))), flush=True)


if __name__ == "__main__":
    main()
