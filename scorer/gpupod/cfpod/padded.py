"""The padded baseline (Model.padded, a member of Model): what a scorer without prefix sharing does on an accelerator. Rows
go in batches, each row padded on the right to the batch's longest, one batched forward
per batch (every row from position 0, plain causal attention), as a Hugging Face
`model(input_ids, attention_mask)` call would. cfpod.bench times it next to the pod's own
paths; its scores equal row-by-row scoring (tested), so the comparison is like for like.
"""

import math

import torch

from .scoring import prepare, temperatures


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


class PaddedScorer:
    """The padded baseline on a model's forward passes (forward.Forward.batch), its
    log-probabilities (scoring.Head) and its plan runner's device counts (rowrun)."""

    def __init__(self, forward, head, runner):
        self.forward, self.head, self.runner = forward, head, runner

    def score_rows_padded(self, rows, batch_tokens=65536):
        """S for every row (as score_rows), from batches of right-padded rows holding at most
        batch_tokens tokens with their padding (a row longer than that goes alone). Returns
        (scores, tokens forwarded with the padding)."""
        prep, _ = prepare(self.forward.cfg, rows)
        temps = temperatures(rows)
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
            run = self.runner
            run.count("calls")
            run.count("tokens", L * len(b))
            hid = self.forward.batch(run.upload(toks), run.upload(wanted))
            lp = run.read(self.head.log_probs(hid, run.upload(targets), run.upload(tt, torch.float64)))
            k = 0
            for i in b:
                _, _, a, c = prep[i]
                out[i] = math.fsum(lp[k:k + c - a]) / (c - a)
                k += c - a
        return out, padded
