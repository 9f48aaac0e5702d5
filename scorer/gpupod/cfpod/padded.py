"""The padded baseline: what a scorer without prefix sharing does on an accelerator. Rows
go in batches, each row padded on the right to the batch's longest, one batched forward
per batch (every row from position 0, plain causal attention), as a Hugging Face
`model(input_ids, attention_mask)` call would. cfpod.bench times it next to the pod's own
paths; its scores equal row-by-row scoring (tested), so the comparison is like for like.
"""

import math

import torch
import torch.nn.functional as F

from . import attention


UPLOADS_PER_BATCH, READS_PER_BATCH = 4, 1  # tokens, wanted positions, targets, temperatures; log-probs


def padded_batches(prep, batch_tokens):
    """Rows (indices into prep) in batches of at most batch_tokens tokens with padding, the
    shortest first (the least padding)."""
    order = sorted(range(len(prep)), key=lambda i: len(prep[i][0]))
    batches, cur = [], []
    for i in order:
        L = len(prep[i][0])
        if cur and (len(cur) + 1) * L > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


class _PaddedScoring:
    """The padded-baseline methods of Model."""

    def score_rows_padded(self, rows, batch_tokens=65536):
        """S for every row (as score_rows), from batches of right-padded rows holding at most
        batch_tokens tokens with their padding (a row longer than that goes alone). Returns
        (scores, tokens forwarded with the padding)."""
        prep, _ = self._prepare(rows)
        temps = self._temperatures(rows)
        batches = padded_batches(prep, batch_tokens)
        out, padded = [0.0] * len(prep), 0
        for b in batches:
            L = max(len(prep[i][0]) for i in b)
            padded += L * len(b)
            toks = [prep[i][0] + [0] * (L - len(prep[i][0])) for i in b]
            wanted, targets, tt = [], [], []
            for r, i in enumerate(b):
                seq, cl, a, c = prep[i]
                for p in range(cl + a - 1, cl + c - 1):
                    wanted.append(r * L + p)
                    targets.append(seq[p + 1])
                    tt.append(temps[i])
            self._count("calls")
            self._count("tokens", L * len(b))
            hid = self.forward_batch(self.upload(toks), self.upload(wanted))
            lp = self.read(self._log_probs(hid, self.upload(targets), self.upload(tt, torch.float64)))
            k = 0
            for i in b:
                _, _, a, c = prep[i]
                out[i] = math.fsum(lp[k:k + c - a]) / (c - a)
                k += c - a
        return out, padded

    def forward_batch(self, toks, out_idx):
        """One forward over right-padded rows toks [B, L] from position 0 (padding after a
        row's tokens: causal attention never lets a real token see it), every position
        through every layer as a padded batch computes it. Returns the final-norm hidden
        states of the flat indices out_idx (row * L + position)."""
        c = self.cfg
        B, L = toks.shape
        pos = torch.arange(L, device=self.device).repeat(B)
        cos, sin = self._rope_tables(pos)
        x = self.embed[toks.reshape(-1)]
        with (torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()):
            for li in range(c.layers):
                W = self.layer_w[li]
                q, k, v = self._qkv(W, x, cos, sin)  # [B*L, H, D]
                a = self._attend_batch(q.view(B, L, c.heads, c.head_dim), k.view(B, L, c.kv_heads, c.head_dim),
                                       v.view(B, L, c.kv_heads, c.head_dim))
                x = x + F.linear(a, W["self_attn.o_proj.weight"], W.get("self_attn.o_proj.bias"))
                h = self._rms(x, W["post_attention_layernorm.weight"])
                gt = F.linear(h, W["mlp.gate_proj.weight"], W.get("mlp.gate_proj.bias"))
                up = F.linear(h, W["mlp.up_proj.weight"], W.get("mlp.up_proj.bias"))
                x = x + F.linear(F.silu(gt) * up, W["mlp.down_proj.weight"], W.get("mlp.down_proj.bias"))
        return self._rms(x[out_idx], self.norm)

    def _attend_batch(self, q, k, v):
        """Causal attention of B rows at once ([B, L, H, D] each): one fused call on the
        accelerator path, row by row on the reference path. Returns [B*L, Hq*D]."""
        B, L, H, D = q.shape
        if self.use_sdpa:
            qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            kw = {}
            if H != kh.shape[1]:
                if attention.HAS_GQA:
                    kw["enable_gqa"] = True
                else:
                    kh, vh = kh.repeat_interleave(H // kh.shape[1], 1), vh.repeat_interleave(H // kh.shape[1], 1)
            o = attention._sdpa(qh, kh, vh, is_causal=True, **kw)
            return o.transpose(1, 2).reshape(B * L, H * D)
        return torch.cat([attention.attend(q[r], k[r].permute(1, 0, 2), v[r].permute(1, 0, 2), causal=True)
                          for r in range(B)])
