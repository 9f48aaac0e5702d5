"""The pod's model: a Llama-family checkpoint (Llama, Qwen2, Qwen3) loaded on one device, with
the two scorer operations of creditflow: LAPO row scores (docs/method.md §2.1) and AttnSR
step graphs (docs/method.md §3.1).

Model is a composition of members, each in a file of its own:
- net (creditflow.llama.Llama): the weights and the network's arithmetic, the one torch
  Llama of creditflow's Python code, which the loop's policy (creditflow.policy) runs too;
- forward (forward.Forward): the pod's forward passes over the key/value cache with its
  attention kernels (attention.py);
- head (scoring.Head): log-probabilities from the LM head in float32, softmax in float64;
- scores (scoring.RowScorer): the row statistics (LAPO scores, entropy, kl);
- plans (rowrun.PlanRunner): runs prefix-sharing plans (rowplan.py), counts device work;
- padded (padded.PaddedScorer): the padded baseline the benchmarks compare with;
- graphs (graphs.StepGraphs): the attention reader behind AttnSR's step graphs.
Model itself loads checkpoints and answers the calls the server makes.

Guarantees:
- The arithmetic is the one of the Go reference model (scorer/cpumodel; creditflow.llama
  states it). In float32 on CPU it agrees with the Go reference to float32 rounding.
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

from creditflow.llama import Llama

from . import attention
from . import safetensors as st
from .config import (ARCHITECTURES, Config, InputError, ModelError, dtype_from_name,  # noqa: F401
                     find_placeholder, read_config, tensor_names)
from .forward import Forward, inference  # noqa: F401
from .graphs import QUERY_BLOCK, StepGraphs  # noqa: F401
from .padded import PaddedScorer
from .rowrun import Counts, PlanRunner  # noqa: F401
from .scoring import Head, RowScorer, Usage  # noqa: F401


def _tied_as_transformers(cfg, ts, dtype, device):
    """The tensor reader for Model, with the embeddings and the output head tied as
    transformers 5 ties them at load: an untied config needs lm_head.weight; a tied one uses
    the embeddings as the head, except where the file also holds an lm_head.weight that
    differs from them (transformers then keeps both, untied, and warns that the config is
    wrong: cfg.tie_embeddings becomes False here) and where the file holds only lm_head.weight
    (the embeddings are then read from it)."""
    embed, head = "model.embed_tokens.weight", "lm_head.weight"
    if not cfg.tie_embeddings:
        if not ts.has(head):
            raise ModelError(f'tensor "{head}" is missing and config says tie_word_embeddings=false')
    elif ts.has(embed) and ts.has(head):
        # both read once, here, and handed to Model (the head only where it differs)
        shape = [cfg.vocab, cfg.hidden]
        read = {embed: ts.load(embed, shape, dtype=dtype, device=device)}
        b = ts.load(head, shape, dtype=dtype, device=device)
        if not torch.equal(read[embed], b):
            cfg.tie_embeddings = False
            read[head] = b
        del b
        return lambda n, s: read.pop(n) if n in read else ts.load(n, s, dtype=dtype, device=device)
    elif ts.has(head):
        return lambda n, s: ts.load(head if n == embed else n, s, dtype=dtype, device=device)
    return lambda n, s: ts.load(n, s, dtype=dtype, device=device)


class Model:
    """A loaded network on one device in one dtype, as a composition of members (see above).
    Calls are not thread-safe on a shared device stream; the server serializes them."""

    def __init__(self, cfg, get, device="cpu", dtype=torch.float32, name="", placeholder=None):
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.name, self.placeholder = name, list(placeholder or [])
        w = {n: get(n, shape) for n, shape in tensor_names(cfg).items()}
        layers = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            layers.append({k[len(p):]: v for k, v in w.items() if k.startswith(p)})
        embed = w["model.embed_tokens.weight"]
        self.net = Llama(cfg, embed, w["model.norm.weight"], embed if cfg.tie_embeddings else w["lm_head.weight"],
                         layers, cfg.inv_freq.to(self.device))
        self.forward = Forward(self.net, self.device, dtype)
        self.head = Head(self.net)
        self.plans = PlanRunner(self.forward, self.head)
        self.scores = RowScorer(self.forward, self.head, self.plans)
        self.padded = PaddedScorer(self.forward, self.head, self.plans)
        self.graphs = StepGraphs(self.forward)

    # ----- settings (held by the member they steer) ------------------------------------

    @property
    def use_sdpa(self):
        """Whether attention runs on the fused kernels (forward.Forward)."""
        return self.forward.use_sdpa

    @use_sdpa.setter
    def use_sdpa(self, v):
        self.forward.use_sdpa = v

    @property
    def packing(self):
        """How score_rows shares prefixes, "walk" or "tree" (scoring.RowScorer)."""
        return self.scores.packing

    @packing.setter
    def packing(self, v):
        self.scores.packing = v

    @property
    def pack_tokens(self):
        return self.scores.pack_tokens

    @pack_tokens.setter
    def pack_tokens(self, v):
        self.scores.pack_tokens = v

    @property
    def counts(self):
        """A rowrun.Counts that counts the device's work (cfpod.bench), or None."""
        return self.plans.counts

    @counts.setter
    def counts(self, v):
        self.plans.counts = v

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

    # ----- the calls (each answered by the member that computes it) ----------------------

    def score_rows(self, rows, packing=None, pack_tokens=None):
        """LAPO row scores with prefix sharing: scoring.RowScorer.score_rows."""
        return self.scores.score_rows(rows, packing, pack_tokens)

    def plan_rows(self, rows, packing=None, pack_tokens=None):
        """The model-free part of score_rows (outside the model lock): RowScorer.plan_rows."""
        return self.scores.plan_rows(rows, packing, pack_tokens)

    def score_plan(self, planned):
        """Scores a plan_rows result on the model (inside the model lock): RowScorer.score_plan."""
        return self.scores.score_plan(planned)

    def score_rows_naive(self, rows):
        """Row-by-row scores without prefix sharing: RowScorer.score_rows_naive."""
        return self.scores.score_rows_naive(rows)

    def score_rows_statistic(self, rows, stat):
        """The logprob, entropy or kl statistic of rows: RowScorer.score_rows_statistic."""
        return self.scores.score_rows_statistic(rows, stat)

    def score_rows_padded(self, rows, batch_tokens=65536):
        """The padded baseline: padded.PaddedScorer.score_rows_padded."""
        return self.padded.score_rows_padded(rows, batch_tokens)

    def step_graphs(self, tokens, steps, layers, block=QUERY_BLOCK):
        """AttnSR step graphs: graphs.StepGraphs.step_graphs."""
        return self.graphs.step_graphs(tokens, steps, layers, block)

    def step_graphs_dense(self, tokens, steps, layers):
        """The step graphs from dense attention matrices (tests): StepGraphs.step_graphs_dense."""
        return self.graphs.step_graphs_dense(tokens, steps, layers)

    # ----- loading ----------------------------------------------------------------------

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
            get = _tied_as_transformers(cfg, ts, dtype, device)
            m = cls(cfg, get, device, dtype)
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

    def info(self):
        c = self.cfg
        return {"name": self.name, "architecture": c.architecture, "layers": c.layers,
                "vocab_size": c.vocab, "max_context": c.max_context,
                "placeholder_ids": list(self.placeholder)}
