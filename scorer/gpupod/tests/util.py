"""Shared helpers of the pod's tests: small configs, random checkpoints, the device."""

import json
import os

import torch

from cfpod import safetensors as st
from cfpod.model import Config, Model, tensor_names

# Tests run on CPU float32 by default; gpu_check.sh sets CFPOD_TEST_DEVICE=cuda.
DEVICE = os.environ.get("CFPOD_TEST_DEVICE", "cpu")
ON_CPU = DEVICE == "cpu"
# Tolerance of comparisons against float64 references: float32 rounding on CPU, fused
# kernels (different summation order) on accelerators.
TOL = 2e-5 if ON_CPU else 2e-4


def cpu_only(cls):
    """Skips a test class on an accelerator run: it exercises no model (file formats, wire
    decoding), so the CPU run covers it and the device's minutes go to the model."""
    import unittest
    return unittest.skipUnless(ON_CPU, "no model work: covered by the CPU run")(cls)


def small_config(arch="LlamaForCausalLM", **over):
    h = {"architectures": [arch], "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 12, "intermediate_size": 80, "vocab_size": 97,
         "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": arch == "Qwen2ForCausalLM", "hidden_act": "silu"}
    if arch == "LlamaForCausalLM":
        h["attention_bias"] = True
    h.update(over)
    return h


def random_tensors(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n, shape in tensor_names(cfg).items():
        if n.endswith("norm.weight"):
            t = 1 + 0.2 * (torch.rand(shape, generator=g) * 2 - 1)
        elif n.endswith(".bias"):
            t = 0.3 * (torch.rand(shape, generator=g) * 2 - 1)
        else:
            a = 1.0 if "embed" in n else 2 * (3.0 / shape[-1]) ** 0.5
            t = a * (torch.rand(shape, generator=g) * 2 - 1)
        out[n] = t
    return out


def write_checkpoint(folder, h, seed=0, dtype="F32", shards=1, placeholder=None):
    """Writes config.json and *.safetensors (and a tokenizer.json naming [DELETE])."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(h, f)
    ts = random_tensors(Config(h), seed)
    names = list(ts)
    per = (len(names) + shards - 1) // shards
    for i in range(shards):
        part = {n: ts[n] for n in names[i * per:(i + 1) * per]}
        st.write(os.path.join(folder, f"model-{i + 1:05d}-of-{shards:05d}.safetensors"), part, dtype)
    if placeholder is not None:
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            json.dump({"added_tokens": [{"id": placeholder, "content": "[DELETE]"}]}, f)
    return ts


def model_from(h, seed=0, dtype=torch.float32):
    ts = random_tensors(Config(h), seed)
    return Model(Config(h), lambda n, s: ts[n].to(DEVICE, dtype), DEVICE, dtype, "test"), ts
