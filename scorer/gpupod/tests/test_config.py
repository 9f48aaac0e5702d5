"""config.json of both generations of transformers, and what the pod refuses at load.

Mirrors scorer/cpumodel's TestConfigForms: 4.x-era files (rope_theta, rope_scaling, torch_dtype)
and transformers 5's (rope_parameters holding rope_theta, dtype, layer_types) read to the
same configuration; a config neither scorer implements is refused naming the field.
"""

import os
import random
import shutil
import tempfile
import unittest

import torch

from cfpod.config import Config, ModelError
from cfpod.model import Model
from tests.util import small_config, write_checkpoint

BASE = {"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 4,
        "vocab_size": 5, "max_position_embeddings": 131072}
LLAMA3 = {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
          "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def cfg(arch, **over):
    h = {"architectures": [arch]}
    h.update(BASE)
    h.update(over)
    return h


class ConfigFormsTest(unittest.TestCase):
    def test_both_generations(self):
        v4 = Config(cfg("LlamaForCausalLM", model_type="llama", torch_dtype="bfloat16", rope_theta=500000.0,
                        rope_scaling=dict(LLAMA3)))
        v5 = Config(cfg("LlamaForCausalLM", model_type="llama", dtype="bfloat16",
                        rope_parameters=dict(LLAMA3, rope_theta=500000.0)))
        self.assertEqual(v4.rope_theta, 500000.0)
        self.assertEqual(v5.rope_theta, 500000.0)
        self.assertTrue(torch.equal(v4.inv_freq, v5.inv_freq))
        q5 = Config(cfg("Qwen2ForCausalLM", model_type="qwen2", layer_types=["full_attention"] * 2,
                        use_sliding_window=False, sliding_window=None, max_window_layers=21,
                        rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}))
        self.assertEqual((q5.rope_theta, q5.max_context), (1e6, 131072))
        self.assertFalse(Config(cfg("Qwen3ForCausalLM")).tie_embeddings)  # transformers' default

    def test_full_attention_accepted(self):
        for h in (cfg("Qwen2ForCausalLM", use_sliding_window=True, sliding_window=64, max_window_layers=2),
                  cfg("Qwen2ForCausalLM", use_sliding_window=True, sliding_window=131072, max_window_layers=0),
                  cfg("Qwen3ForCausalLM", layer_types=["sliding_attention", "full_attention"], sliding_window=None)):
            Config(h)

    def test_refused_naming_the_field(self):
        cases = {
            "mistral": (cfg("MistralForCausalLM", model_type="mistral"), '"architectures"'),
            "gemma": (cfg("Gemma2ForCausalLM", model_type="gemma2"), '"architectures"'),
            "model_type": (cfg("LlamaForCausalLM", model_type="mistral"), '"model_type"'),
            "yarn (4.x)": (cfg("Qwen2ForCausalLM", rope_scaling={"type": "yarn", "factor": 4.0,
                                                                 "original_max_position_embeddings": 32768}),
                           '"rope_scaling": rope_type \'yarn\''),
            "dynamic (5)": (cfg("LlamaForCausalLM", rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                     "rope_theta": 10000.0}),
                            '"rope_parameters": rope_type \'dynamic\''),
            "per-layer rope": (cfg("LlamaForCausalLM", rope_parameters={"full_attention": {"rope_type": "default"}}),
                               '"rope_parameters"'),
            "partial rotary": (cfg("LlamaForCausalLM", partial_rotary_factor=0.5), '"partial_rotary_factor"'),
            "sliding (4.x)": (cfg("Qwen2ForCausalLM", use_sliding_window=True, sliding_window=64, max_window_layers=1),
                              '"use_sliding_window"'),
            "sliding default": (cfg("Qwen3ForCausalLM", use_sliding_window=True, max_window_layers=0),
                                '"use_sliding_window"'),
            "sliding (5)": (cfg("Qwen2ForCausalLM", layer_types=["full_attention", "sliding_attention"], sliding_window=64),
                            '"layer_types": layer 1'),
            "unknown layer type": (cfg("Qwen3ForCausalLM", layer_types=["full_attention", "linear_attention"]),
                                   '"layer_types"'),
            "quantized": (cfg("LlamaForCausalLM", quantization_config={"quant_method": "gptq", "bits": 4}),
                          '"quantization_config"'),
            "bad sliding_window": (cfg("Qwen2ForCausalLM", use_sliding_window=True, sliding_window="64"),
                                   '"sliding_window"'),
        }
        for name, (h, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ModelError) as e:
                    Config(h)
                self.assertIn(want, str(e.exception))


class MaxContextTest(unittest.TestCase):
    def test_cap(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        write_checkpoint(os.path.join(folder, "m"), small_config(), seed=4)
        full = Model.load(os.path.join(folder, "m"))
        capped = Model.load(os.path.join(folder, "m"), max_context=50)
        self.assertEqual((capped.info()["max_context"], full.info()["max_context"]), (50, 2048))
        r = random.Random(5)
        ctx, tgt = [r.randrange(97) for _ in range(80)], [r.randrange(97) for _ in range(10)]
        got, u = capped.score_rows([(ctx, tgt, (2, 9), 0.7)])
        want, _ = full.score_rows([(ctx[40:], tgt, (2, 9), 0.7)])
        self.assertEqual(u.truncations, 1)
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
