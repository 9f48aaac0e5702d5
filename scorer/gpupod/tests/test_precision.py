"""Log-probabilities in float32 whatever the model's dtype: the LM head of a bfloat16 model
runs in float32 on the bfloat16 hidden states and weights (a bfloat16 matmul would round
every logit to 8 significant bits, ~1e-2 at logits of a few units)."""

import unittest

import torch

from tests.util import DEVICE, model_from, small_config


class LogProbPrecisionTest(unittest.TestCase):
    def test_bf16_model_head_in_float32(self):
        m, _ = model_from(small_config(tie_word_embeddings=False), seed=3, dtype=torch.bfloat16)
        g = torch.Generator().manual_seed(4)
        hid = (torch.rand(20, m.cfg.hidden, generator=g) * 6 - 3).to(DEVICE, torch.bfloat16)
        toks = torch.arange(20, device=DEVICE) * 3
        got = m.head.log_probs(hid, toks).cpu()
        exact = torch.log_softmax(hid.double() @ m.net.lm_head.double().T, -1).cpu()
        want = exact[torch.arange(20), toks.cpu()]
        err = float((got - want).abs().max())
        self.assertLess(err, 2e-5, "the LM head must run in float32")
        self.assertIs(m.head.head32(), m.head.head32())  # converted once
        self.assertEqual(m.head.head32().dtype, torch.float32)


if __name__ == "__main__":
    unittest.main()
