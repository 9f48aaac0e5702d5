"""Framework-free pieces of the trainer plug-ins (docs/integrations.md): a training row
(token ids and a mask that is 1 on the policy's tokens) cut into a creditflow trajectory's
prompt and turns, and a sample's per-token advantages put back onto the row."""

import numpy as np


class MissingSamples(TimeoutError):
    """The samples of some published trajectories did not arrive in time; ``missing`` holds
    their trajectory ids."""

    def __init__(self, missing, timeout, topic):
        self.missing = sorted(missing)
        super().__init__("no sample on %s within %.1f s for %d trajectories: %s (is `creditflow run` running "
                         "and reading the trajectories topic? dead letters on creditflow.dead-letters say why a "
                         "trajectory was refused)" % (topic, timeout, len(self.missing), ", ".join(self.missing)))


def split_turns(input_ids, mask, tool_kind="search", final_kind="answer"):
    """Cuts a row into (prompt_ids, turns): the tokens before the first 1 of `mask` are the
    prompt, each run of 1s is a turn's action and the run of 0s after it the turn's
    observation (tool output, environment text). The last turn is `final_kind` when nothing
    follows its action, `tool_kind` otherwise; every earlier turn is `tool_kind`.

    Raises ValueError for a row whose lengths differ, that starts with a policy token (a
    trajectory starts with its prompt) or that has no policy token."""
    ids = [int(x) for x in np.asarray(input_ids).reshape(-1)]
    m = [int(x) for x in np.asarray(mask).reshape(-1)]
    if len(ids) != len(m):
        raise ValueError("row has %d token ids and %d mask entries" % (len(ids), len(m)))
    if any(x not in (0, 1) for x in m):
        raise ValueError("mask entries must be 0 or 1")
    if 1 not in m:
        raise ValueError("row has no policy token (mask is all 0)")
    first = m.index(1)
    if first == 0:
        raise ValueError("row starts with a policy token: a trajectory starts with its prompt")
    turns = []
    i = first
    while i < len(ids):
        a = i
        while i < len(ids) and m[i] == 1:
            i += 1
        o = i
        while i < len(ids) and m[i] == 0:
            i += 1
        turns.append([tool_kind, ids[a:o], ids[o:i] or None])
    if turns[-1][2] is None:
        turns[-1][0] = final_kind
    return ids[:first], [tuple(t) for t in turns]


def align_advantages(input_ids, mask, sample):
    """The sample's per-token advantages as a float32 array over the row: the sample's value
    on the row's policy tokens, 0 on every other token (prompt, tool and environment tokens).

    The sample must be the row's trajectory: the same tokens and a loss mask equal to `mask`
    (ValueError otherwise, naming the first difference)."""
    ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
    m = np.asarray(mask).reshape(-1).astype(bool)
    tokens = np.asarray(sample["tokens"], dtype=np.int64).reshape(-1)
    tid = sample.get("trajectory_id")
    if tokens.shape != ids.shape or not np.array_equal(tokens, ids):
        raise ValueError("sample %s: its %d tokens are not the row's %d tokens" % (tid, tokens.size, ids.size))
    lm = np.asarray(sample["loss_mask"]).reshape(-1).astype(bool)
    if not np.array_equal(lm, m):
        k = int(np.flatnonzero(lm != m)[0])
        raise ValueError("sample %s: loss_mask differs from the row's mask at token %d" % (tid, k))
    adv = sample.get("advantages")
    if adv is None:
        raise ValueError("sample %s has no advantages (output is %r; run the processor with output "
                         "advantages)" % (tid, sample.get("output")))
    adv = np.asarray(adv, dtype=np.float32).reshape(-1)
    if adv.size != ids.size:
        raise ValueError("sample %s: %d advantages for %d tokens" % (tid, adv.size, ids.size))
    return np.where(m, adv, np.float32(0)).astype(np.float32)
