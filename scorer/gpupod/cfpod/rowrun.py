"""Running a row plan (rowplan.py) on the model (Model.plans, a member of Model): the model calls of one score request with
one upload of its indices and one read of its results.

Guarantees:
- host to device: the plan's two arrays (integers, temperatures), once per request; every
  call takes slices of them, so no call waits on a copy;
- device to host: one read per request, after the last call: the log-probabilities of every
  scored token (float32 LM head, float64 softmax), kept on the device until then;
- PlanRunner.counts (Model.counts) counts what the device sees (model calls, uploads, reads, tokens), for
  cfpod.bench's per-request counts.
"""

import torch


class Counts:
    """What a request made the device do: model calls, host-to-device uploads, device-to-host
    reads (each a blocking host sync on an accelerator), tokens forwarded."""

    __slots__ = ("calls", "uploads", "reads", "tokens")

    def __init__(self):
        self.calls = self.uploads = self.reads = self.tokens = 0

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class PlanRunner:
    """Runs row plans on the forward passes (forward.Forward) and the log-probabilities
    (scoring.Head) of a model; counts (a Counts, or None) counts the device's work."""

    def __init__(self, forward, head):
        self.forward, self.head, self.device = forward, head, forward.device
        self.counts = None

    def count(self, what, n=1):
        c = self.counts
        if c is not None:
            setattr(c, what, getattr(c, what) + n)

    def upload(self, values, dtype=torch.long):
        self.count("uploads")
        return torch.tensor(values, dtype=dtype, device=self.device)

    def read(self, t):
        self.count("reads")
        return t.tolist()

    @torch.inference_mode() if hasattr(torch, "inference_mode") else torch.no_grad()
    def run_plan(self, prep, plan):
        """The log-probability of every scored token of plan, in plan.outs order (floats)."""
        if not plan.outs:
            return []
        ints = self.upload(plan.ints)
        temps = self.upload(plan.temps, torch.float64)
        cache = None
        if plan.needs_cache:  # edges, packs on a cached path, packs that leave one
            cache = self.forward.cache(max(len(p[0]) for p in prep), self.forward.cfg.layers)
        lps, done = [], 0
        for call in plan.calls:
            self.count("calls")
            if call[0] == "edge":
                _, start, end, tok_off, outs = call
                self.count("tokens", end - start)
                cache.n = start
                toks = ints[tok_off:tok_off + end - start]
                if outs is None:
                    self.forward.cached(cache, toks)
                    continue
                n_uniq, pos_off, n_outs, sel_off = outs
                hid = self.forward.cached(cache, toks, out_pos=ints[pos_off:pos_off + n_uniq])
            else:
                _, prefix, U, tok_off, pos_off, node_off, n_nodes, anc_off, outs = call
                self.count("tokens", U)
                # A pack without scored tokens still leaves its path's keys and values in
                # the cache for the calls below it.
                n_uniq, opos_off, n_outs, sel_off = outs if outs is not None else (0, 0, 0, 0)
                hid = self.forward.packed(ints[tok_off:tok_off + U], ints[pos_off:pos_off + U],
                                          ints[node_off:node_off + U],
                                          ints[anc_off:anc_off + n_nodes * n_nodes].view(n_nodes, n_nodes).bool(),
                                          ints[opos_off:opos_off + n_uniq], cache, prefix)
                if outs is None:
                    continue
            # The LM head per call, on the call's own rows (matmul rounding depends on the
            # batch, and these are the batches row-by-row scoring makes for a row's span).
            o = done
            lps.append(self.head.log_probs(hid[ints[sel_off:sel_off + n_outs]],
                                       ints[plan.target_off + o:plan.target_off + o + n_outs], temps[o:o + n_outs]))
            done += n_outs
        return self.read(torch.cat(lps) if len(lps) > 1 else lps[0])
