"""Turning a list of samples into trainer tensors (docs/trainers.md).

Padded form (right padding), shape [B, L]:
  input_ids (int64), attention_mask (int64, 1 on real tokens), loss_mask (float32, 1 on
  policy tokens), advantages (float32; zeros when the batch carries token rewards),
  token_rewards (float32; zeros when the batch carries advantages), rollout_logprobs
  (float32; 0 where absent), plus per-sample vectors: lengths, policy_version,
  scorer_policy_version (-1 when unknown), reward, outcome_advantage, and the list
  trajectory_ids.

Packed form (packed=True): every per-token array is [1, T] with T = sum of lengths, plus
position_ids [1, T] (restarting at 0 in each sample) and cu_seqlens [B + 1] (int32, the
cumulative lengths flash-attention's varlen kernels take), and max_seqlen.

The per-token arrays of a batch reuse the memory of an earlier batch's arrays once nothing
references those any more (reuse=False: fresh memory every time; creditflow._recycle says why).
"""

import numpy as np

from ._recycle import ArrayPool

__all__ = ["to_numpy", "to_torch"]

_TOKEN_FIELDS = ("input_ids", "attention_mask", "loss_mask", "advantages", "token_rewards", "rollout_logprobs")
_INT64 = ("input_ids", "attention_mask")
_OPTIONAL = ("advantages", "token_rewards", "rollout_logprobs")

_POOL = ArrayPool()


def to_numpy(batch, packed=False, pad_id=0, pad_to_multiple=1, reuse=True) -> dict:
    """Numpy arrays for a list of samples (dicts as decode_sample returns them).

    With reuse (the default) the per-token arrays may live in memory that an earlier batch's
    arrays used, but only once no array, view or tensor of that batch is alive."""
    if not batch:
        raise ValueError("empty batch")
    lengths = np.array([s["tokens"].size for s in batch], dtype=np.int64)
    out = {
        "lengths": lengths,
        "trajectory_ids": [s["trajectory_id"] for s in batch],
        "prompt_ids": [s["prompt_id"] for s in batch],
        "policy_version": np.array([s["policy_version"] for s in batch], dtype=np.int64),
        "scorer_policy_version": np.array([-1 if s.get("scorer_policy_version") is None else s["scorer_policy_version"]
                                           for s in batch], dtype=np.int64),
        "reward": np.array([s["reward"] for s in batch], dtype=np.float32),
        "outcome_advantage": np.array([s["outcome_advantage"] for s in batch], dtype=np.float32),
    }
    # Per row: the fields some sample of the batch has; once per batch: the attention mask and
    # the optional fields no sample has (zeros). The arrays start uninitialized: every element
    # is written below.
    absent = [f for f in _OPTIONAL if all(s.get(f) is None for s in batch)]
    rows = [("input_ids", "tokens"), ("loss_mask", "loss_mask")] + [(f, f) for f in _OPTIONAL if f not in absent]
    new = _POOL.empty if reuse else np.empty
    if packed:
        shape = (1, int(lengths.sum()))
    else:
        L = int(lengths.max())
        if pad_to_multiple > 1:
            L = -(-L // pad_to_multiple) * pad_to_multiple
        shape = (len(batch), L)
    arrs = {f: new(shape, np.int64 if f in _INT64 else np.float32) for f in _TOKEN_FIELDS}
    for f in absent:
        arrs[f].fill(0)
    out.update(arrs)
    if packed:
        cu = np.zeros(len(batch) + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu[1:])
        pos = new(shape, np.int64)
        arrs["attention_mask"].fill(1)
        for i, s in enumerate(batch):
            a, b = int(cu[i]), int(cu[i + 1])
            _fill(arrs, rows, 0, a, b, s)
            pos[0, a:b] = np.arange(b - a)
        out["position_ids"] = pos
        out["cu_seqlens"] = cu
        out["max_seqlen"] = int(lengths.max())
        return out
    np.less(np.arange(L), lengths[:, None], out=arrs["attention_mask"], casting="unsafe")
    for i, s in enumerate(batch):
        n = s["tokens"].size
        _fill(arrs, rows, i, 0, n, s)
        if n < L:  # right padding
            for f, _ in rows:
                arrs[f][i, n:] = pad_id if f == "input_ids" else 0
    return out


def _fill(arrs, rows, row, a, b, s):
    """Writes sample s into arrs[f][row, a:b] for the (array, sample field) pairs of rows (0
    where the sample lacks the field)."""
    for f, src in rows:
        v = s.get(src)
        arrs[f][row, a:b] = 0 if v is None else v


def to_torch(batch, packed=False, pad_id=0, pad_to_multiple=1, device=None, reuse=True) -> dict:
    """As to_numpy, with torch tensors (needs torch; `device` moves them). Each tensor keeps
    its numpy array alive, so reuse never touches the memory of a tensor still held."""
    import torch

    out = to_numpy(batch, packed=packed, pad_id=pad_id, pad_to_multiple=pad_to_multiple, reuse=reuse)
    res = {}
    for k, v in out.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(v)
            res[k] = t.to(device) if device is not None else t
        else:
            res[k] = v
    return res
