#!/usr/bin/env python3
"""Hugging Face transformers as the reference for creditflow's scorers.

usage: transformers_ref.py build     < build.json  > models.json
       transformers_ref.py reference < jobs.json   > results.json

build: for every requested checkpoint, reads its published config.json from
configs/ (as the model's owners published it), cuts only the sizes the CPU
needs (hidden size, intermediate size, layers, attention heads keeping the
grouped-query ratio, vocabulary; head_dim stays as published), builds the
model with transformers, fills every weight from a seeded generator with
scales that make the next-token distributions far from uniform, and
save_pretrained()s it (safetensors) twice: float32 into OUT/NAME and
bfloat16 into OUT/NAME-bf16.
  build.json:  {"out": DIR, "models": [{"name": NAME, "seed": N, "form": "v5"|"v4",
                                      "variant": (optional, see apply_variant)}]}
  A model with a variant is saved as NAME+VARIANT.
  "form": "v5" keeps the config.json transformers 5 writes (rope_parameters,
  dtype, layer_types); "v4" writes the published 4.x-era fields instead
  (rope_theta, rope_scaling, torch_dtype), cut the same way: the scorers must
  read both.
  models.json: [{"name", "dir", "dir_bf16", "config": {...as written...},
                 "entropy": mean next-token entropy (nats) on random text,
                 "log_vocab": log(vocab)}]

reference: transformers' own numbers for rows and step graphs, one job per
model folder and dtype. The model is loaded with from_pretrained
(attn_implementation="eager"), one sequence per forward (no padding).
  jobs.json: [{"dir": DIR, "dtype": "float32"|"bfloat16", "max_context": N,
               "rows": [{"context", "target", "span", "temperature",
                         "statistic": "logprob"|"entropy"|"kl",
                         "reference_context"}],
               "attention": [{"tokens", "steps": [{"action": [s,e],
                              "observation": [s,e] or null}], "layers"}]}]
  "dtype": "float32" loads the weights as float32 (a bfloat16 folder is then
  upcast exactly, as the Go scorer reads it); "bfloat16" runs transformers in
  bfloat16.
  results.json: [{"scores": [...], "graphs": [[{"layer", "aa", "ao"}]]}]

Rows (docs/method.md §2.1, §2.4): a context longer than max_context minus
the target keeps its rightmost tokens; p = softmax(logits / T) with
transformers' logits (float32, or bfloat16) taken to float64 before the
division; S is the mean log p of target[a:b]; entropy the mean of
-sum p log p over the same positions; kl the mean of
sum p (log p - log q) with q under the reference context. Step graphs
(docs/method.md §3.1) fold output_attentions: for step j's action tokens as
queries, the attention mass on step k's action (aa) and observation (ao)
tokens, summed over those keys, averaged over the queries and all heads,
k < j only, in float64.
"""
import json
import math
import os
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))

# Cut sizes per checkpoint: heads and KV heads keep the published
# grouped-query ratio, head_dim stays as published (explicit where the
# config has it, hidden/heads where it has not).
CUTS = {
    "Qwen2.5-0.5B-Instruct": dict(hidden_size=448, intermediate_size=640, num_hidden_layers=3,
                                  num_attention_heads=7, num_key_value_heads=1, vocab_size=1536),
    "Qwen2.5-7B-Instruct": dict(hidden_size=896, intermediate_size=768, num_hidden_layers=2,
                                num_attention_heads=7, num_key_value_heads=1, vocab_size=1280),
    "Qwen3-0.6B": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=1536),
    "Qwen3-8B": dict(hidden_size=512, intermediate_size=768, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=1, vocab_size=1280),
    "Llama-3.2-1B": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=1, vocab_size=1536),
    "Llama-3.1-8B": dict(hidden_size=512, intermediate_size=768, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, vocab_size=1280),
}


def published(name):
    with open(os.path.join(HERE, "configs", name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def cut_config(name):
    pub = published(name)
    cut = dict(pub)
    cut.update(CUTS[name])
    ratio = pub["num_attention_heads"] // pub["num_key_value_heads"]
    assert cut["num_attention_heads"] // cut["num_key_value_heads"] == ratio, name
    pub_hd = pub.get("head_dim") or pub["hidden_size"] // pub["num_attention_heads"]
    hd = cut.get("head_dim") or cut["hidden_size"] // cut["num_attention_heads"]
    assert hd == pub_hd, (name, hd, pub_hd)
    # Token ids of the published tokenizer do not exist in the cut vocabulary.
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if k in cut:
            cut[k] = None
    return cut


def fill_weights(model, seed):
    """Every parameter from one seeded generator: matrices N(0, 1/fan_in) so
    activations keep unit scale, embeddings and head N(0, (4/sqrt(hidden))^2)
    so logits have a standard deviation near 4 (next-token entropy well below
    log V), norm weights around 1, biases N(0, 0.25^2)."""
    g = torch.Generator().manual_seed(seed)
    h = model.config.hidden_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 1 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.25 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or name.startswith("lm_head"):
                v = torch.randn(p.shape, generator=g) * (4 / math.sqrt(h))
            else:
                v = torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1])
            p.copy_(v.to(p.dtype))


def mean_entropy(model, vocab, seed):
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (2, 64), generator=g)
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits.double(), -1)
    return float(-(lp.exp() * lp).sum(-1).mean())


def apply_variant(variant, folder, seed):
    """Changes a saved folder into a checkpoint transformers loads in a particular way:
    lm-head-differs: a tied config whose file also holds an lm_head.weight with other values
      (transformers 5 keeps both, untied, and warns that the config is wrong);
    lm-head-only: a tied config whose file holds lm_head.weight and no embed_tokens
      (transformers ties the embeddings to the head);
    mlp-bias-field: "mlp_bias": true in config.json, a field Qwen2's and Qwen3's MLPs ignore."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(folder, "model.safetensors")
    if variant == "mlp-bias-field":
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        c["mlp_bias"] = True
        with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
            json.dump(c, f, indent=2)
        return
    sd = load_file(path)
    emb = sd["model.embed_tokens.weight"]
    assert "lm_head.weight" not in sd, "a tied checkpoint saves no lm_head"
    if variant == "lm-head-differs":
        g = torch.Generator().manual_seed(seed + 2)
        sd["lm_head.weight"] = (torch.randn(emb.shape, generator=g) * (4 / math.sqrt(emb.shape[1]))).to(emb.dtype)
    elif variant == "lm-head-only":
        sd["lm_head.weight"] = sd.pop("model.embed_tokens.weight")
    else:
        raise ValueError("variant %r" % variant)
    save_file(sd, path, metadata={"format": "pt"})


def build(req):
    out = []
    for spec in req["models"]:
        base, seed, form = spec["name"], int(spec["seed"]), spec.get("form", "v5")
        variant = spec.get("variant")
        name = base + ("+" + variant if variant else "")
        cut = cut_config(base)
        if variant in ("lm-head-differs", "lm-head-only") and not cut.get("tie_word_embeddings"):
            raise ValueError("%s: variant %s needs a tied config" % (base, variant))
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
                json.dump(cut, f)
            cfg = AutoConfig.from_pretrained(tmp)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
        fill_weights(model, seed)
        model.eval()
        # (before the bfloat16 copy below converts the model in place; a variant's folder is
        # measured once changed, as transformers loads it)
        entropy = None if variant else mean_entropy(model, cfg.vocab_size, seed)
        folder = os.path.join(req["out"], name)
        model.save_pretrained(folder)
        model.to(torch.bfloat16).save_pretrained(folder + "-bf16")
        for d in (folder, folder + "-bf16"):
            if form == "v4":
                c = dict(cut)
                c["torch_dtype"] = "float32" if d == folder else "bfloat16"
                with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
                    json.dump(c, f, indent=2)
            if variant:
                apply_variant(variant, d, seed)
        if variant:
            entropy = mean_entropy(load(folder, torch.float32), cfg.vocab_size, seed)
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            written = json.load(f)
        out.append({"name": name, "dir": folder, "dir_bf16": folder + "-bf16", "config": written,
                    "entropy": entropy,
                    "log_vocab": math.log(cfg.vocab_size)})
    return out


def load(folder, dtype):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    model.eval()
    return model


_logits = {}  # (model id, sequence) -> logits: rows of one job share sequences


def log_dists(model, context, target, max_context, temp, a, b):
    """float64 log softmax(logits / T) at the positions predicting target[a:b]."""
    keep = max_context - len(target)
    if len(context) > keep:
        context = context[len(context) - keep:] if keep > 0 else []
    seq = tuple(context) + tuple(target)
    key = (id(model), seq)
    if key not in _logits:
        with torch.no_grad():
            _logits[key] = model(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0]
    logits = _logits[key]
    pos = [len(context) + k - 1 for k in range(a, b)]
    return torch.log_softmax(logits[pos].double() / temp, -1)


def row_value(model, r, max_context):
    a, b = r["span"]
    temp = r.get("temperature") or 1.0
    stat = r.get("statistic") or "logprob"
    lp = log_dists(model, r["context"], r["target"], max_context, temp, a, b)
    if stat == "logprob":
        tgt = torch.tensor(r["target"][a:b], dtype=torch.long)
        return float(lp.gather(1, tgt[:, None]).mean())
    p = lp.exp()
    if stat == "entropy":
        return float((-(p * lp)).sum(-1).mean())
    lq = log_dists(model, r["reference_context"], r["target"], max_context, temp, a, b)
    return float((p * (lp - lq)).sum(-1).mean())


def graphs(model, job):
    ids = torch.tensor([job["tokens"]], dtype=torch.long)
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True).attentions
    steps = job["steps"]
    K = len(steps)
    out = []
    for layer in job["layers"]:
        w = att[layer][0].double()  # [heads, N, N]
        aa = [[0.0] * K for _ in range(K)]
        ao = [[0.0] * K for _ in range(K)]
        for j, sj in enumerate(steps):
            s, e = sj["action"]
            if e <= s:
                continue
            q = w[:, s:e, :]  # [heads, queries, keys]
            for k in range(j):
                ka, kb = steps[k]["action"]
                aa[j][k] = float(q[:, :, ka:kb].sum(-1).mean())
                o = steps[k].get("observation")
                if o and o[1] > o[0]:
                    ao[j][k] = float(q[:, :, o[0]:o[1]].sum(-1).mean())
        out.append({"layer": layer, "aa": aa, "ao": ao})
    return out


def reference(jobs):
    out = []
    for job in jobs:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[job.get("dtype", "float32")]
        model = load(job["dir"], dtype)
        mc = int(job.get("max_context") or model.config.max_position_embeddings)
        scores = [row_value(model, r, mc) for r in job.get("rows", [])]
        gs = [graphs(model, a) for a in job.get("attention", [])]
        out.append({"scores": scores, "graphs": gs})
        _logits.clear()
    return out


def main():
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(int(os.environ.get("CREDITFLOW_REF_THREADS", "2")))
    if len(sys.argv) != 2 or sys.argv[1] not in ("build", "reference"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    req = json.load(sys.stdin)
    res = build(req) if sys.argv[1] == "build" else reference(req)
    json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "result": res}, sys.stdout)


if __name__ == "__main__":
    main()
