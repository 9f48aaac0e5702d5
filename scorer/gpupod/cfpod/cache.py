"""The key/value cache a forward pass extends."""

import torch


class Cache:
    """Keys and values of the positions forwarded so far: per layer [kv_heads, cap, head_dim].
    Truncating back to a shorter prefix is free."""

    def __init__(self, model, cap, layers):
        c = model.cfg
        self.k = [torch.empty(c.kv_heads, cap, c.head_dim, dtype=model.dtype, device=model.device)
                  for _ in range(layers)]
        self.v = [torch.empty_like(x) for x in self.k]
        self.n = 0

    def ensure(self, n):
        cap = self.k[0].shape[1] if self.k else 0
        if n <= cap:
            return
        new = max(n, cap + cap // 2)
        for lst in (self.k, self.v):
            for i, t in enumerate(lst):
                g = torch.empty(t.shape[0], new, t.shape[2], dtype=t.dtype, device=t.device)
                g[:, :self.n] = t[:, :self.n]
                lst[i] = g

