"""The creditflow.scorer/v1 protocol of the pod (docs/scorer-protocol.md): its header,
paths and error answers, and the validation of score and attention requests into model
input. Invalid input raises Reject with the status and code the protocol assigns."""

import array
import base64
import binascii
import math
import sys

PROTOCOL_VERSION = "creditflow.scorer/v1"
PROTOCOL_HEADER = "Creditflow-Scorer-Protocol"

# Features within v1 that /v1/info advertises: "row_pieces" = compact score rows (set-level
# "tokens", "target", "span"; rows with "pieces" instead of "context"); "binary" = binary
# score requests and attention answers (binary.py); "statistics" = a set's "statistic"
# ("entropy" or "kl"; absent: logprob) and the kl rows' "reference" contexts;
# "binary_jobs" = binary attention requests and "lower_graphs" = the lower-graphs attention
# answer (binary.py).
FEATURES = ("row_pieces", "binary", "statistics", "binary_jobs", "lower_graphs")

# The statistics a set may ask for; absent means logprob.
STATISTICS = ("logprob", "entropy", "kl")

PATH_INFO, PATH_SCORE, PATH_ATTENTION = "/v1/info", "/v1/score", "/v1/attention"
PATH_HEALTH, PATH_METRICS, PATH_ADMIN_LOAD = "/healthz", "/metrics", "/v1/admin/load"


class Reject(Exception):
    """An answer other than 200: status, protocol code, message, optional item index and id."""

    def __init__(self, status, code, message, item=None, id_=""):
        super().__init__(message)
        self.status, self.code, self.message, self.item, self.id = status, code, message, item, id_

    def body(self):
        b = {"error": self.message, "code": self.code}
        if self.item is not None:
            b["item"] = self.item
        if self.id:
            b["id"] = self.id
        return b


def bad(message, item=None, id_=""):
    return Reject(400, "bad_request", message, item, id_)


class Tokens:
    """A token array already decoded from a binary body (binary.py): a list of ints. JSON
    never yields this type, so a JSON request cannot pass a token array that skipped the
    base64 rules; decode_tokens takes it as it is."""

    __slots__ = ("ids",)

    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def __eq__(self, other):
        return isinstance(other, Tokens) and self.ids == other.ids

    def __repr__(self):
        return f"Tokens({self.ids!r})"


def _is_token_array(v):
    return isinstance(v, (str, Tokens))


def _estimated_tokens(v):
    """The tokens of a token array for the limits, before decoding: base64 holds 3 bytes per
    4 characters, 4 bytes per token."""
    if isinstance(v, str):
        return len(v) * 3 // 16
    if isinstance(v, Tokens):
        return len(v)
    return 0


def decode_tokens(v, what):
    """A token array on the wire: base64 (standard alphabet, padded) of little-endian int32,
    or Tokens from a binary body. Returns a list of ints (the caller must not change it:
    a Tokens' list is returned as it is)."""
    if v is None:
        return []
    if isinstance(v, Tokens):
        return v.ids
    if not isinstance(v, str):
        raise bad(f"{what}: token array must be a base64 string of little-endian int32")
    try:
        raw = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(f"{what}: token array is not valid base64: {e}") from None
    if len(raw) % 4:
        raise bad(f"{what}: token array has {len(raw)} bytes, not a multiple of 4 (int32 little-endian)")
    a = array.array("i")
    a.frombytes(raw)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tolist()


def _range(v, what):
    if (not isinstance(v, list) or len(v) != 2 or
            not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise bad(f"{what} must be a list of two integers, got {v!r}")
    return int(v[0]), int(v[1])


def _score(x):
    return x if math.isfinite(x) else None


def _bad_token(ids, vocab):
    for k, t in enumerate(ids):
        if not 0 <= t < vocab:
            return k
    return -1


def _row_context(s, r, i, j, sid, shared):
    """Row j's context: its "context", or its "pieces" expanded against the set's tokens
    (shared, decoded once per set): [start, end] spans into them and literal token arrays."""
    pieces = r.get("pieces")
    if pieces is None:
        return decode_tokens(r.get("context"), f"set {i} row {j} context")
    if r.get("context") is not None:
        raise bad(f'set {i} row {j} has both "context" and "pieces"; send one', i, sid)
    if not isinstance(pieces, list):
        raise bad(f"set {i} row {j}: pieces must be a list", i, sid)
    ctx = []
    for k, p in enumerate(pieces):
        if _is_token_array(p):
            ctx.extend(decode_tokens(p, f"set {i} row {j} piece {k}"))
            continue
        a, b = _range(p, f"set {i} row {j} piece {k}")
        if a < 0 or b < a or b > len(shared):
            raise bad(f"set {i} row {j} piece {k}: span [{a}, {b}) is not a range inside the set's "
                      f"{len(shared)} tokens (0 <= start <= end <= len)", i, sid)
        ctx.extend(shared[a:b])
    return ctx


def _statistic(s, i, sid):
    """A set's "statistic": absent or null is logprob; anything but the three is a 400."""
    stat = s.get("statistic")
    if stat is None:
        return "logprob"
    if stat not in STATISTICS:
        raise bad(f"set {i}: statistic {stat!r}: use logprob, entropy or kl", i, sid)
    return stat


def _reference(r, stat, i, j, sid, V):
    """A row's "reference" context: required (non-empty) on kl rows, refused on others."""
    ref = r.get("reference")
    if stat != "kl":
        if ref is not None:
            raise bad(f'set {i} row {j}: "reference" is only taken by the kl statistic (set {stat!r})', i, sid)
        return None
    ref = decode_tokens(ref, f"set {i} row {j} reference")
    if not ref:
        raise bad(f'set {i} row {j}: the kl statistic needs a "reference" context on every row', i, sid)
    k = _bad_token(ref, V)
    if k >= 0:
        raise bad(f"set {i} row {j}: reference token {ref[k]} (index {k}) is outside the vocabulary "
                  f"[0, {V})", i, sid)
    return ref


def parse_score_request(req, info, limits=None, statistics=False):
    """Decodes and validates a score request (the rules of scorer/local/validate.go validateSets).
    limits(rows, tokens) runs after decoding and before validating, as in the Go server.
    Returns [(id, [(context, target, (a, b), temperature)])]; an absent or null "temperature"
    is 1. Compact rows ("pieces", set-level "tokens", "target" and "span") are expanded here.
    With statistics, every set is (id, rows, statistic) and the rows of a kl set carry their
    reference context as a fifth element."""
    if not isinstance(req, dict) or not isinstance(req.get("sets"), list):
        raise bad('score request must be an object with a "sets" list')
    if limits:
        n_rows = n_tok = 0
        for s in req["sets"]:
            rows = s.get("rows") if isinstance(s, dict) else None
            for r in rows if isinstance(rows, list) else []:
                n_rows += 1
                if isinstance(r, dict):
                    n_tok += _estimated_tokens(r.get("context")) + _estimated_tokens(r.get("target"))
                    ps = r.get("pieces")
                    for p in ps if isinstance(ps, list) else []:
                        if _is_token_array(p):
                            n_tok += _estimated_tokens(p)
                        elif isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) for x in p):
                            n_tok += max(0, p[1] - p[0])
                    if r.get("target") is None:
                        n_tok += _estimated_tokens(s.get("target"))
                    n_tok += _estimated_tokens(r.get("reference"))
        limits(n_rows, n_tok)
    V, MC = info["vocab_size"], info["max_context"]
    out = []
    for i, s in enumerate(req["sets"]):
        if not isinstance(s, dict):
            raise bad(f"set {i} is not an object", i)
        sid = s.get("id") or ""
        if not isinstance(sid, str):
            raise bad(f"set {i}: id must be a string", i)
        rows = s.get("rows")
        if not isinstance(rows, list) or not rows:
            raise bad(f"set {i} has no rows", i, sid)
        shared = decode_tokens(s.get("tokens"), f"set {i} tokens")
        set_tgt = s.get("target")
        if set_tgt is not None:
            set_tgt = decode_tokens(set_tgt, f"set {i} target")
        stat = _statistic(s, i, sid)
        parsed = []
        for j, r in enumerate(rows):
            if not isinstance(r, dict):
                raise bad(f"set {i} row {j} is not an object", i, sid)
            ctx = _row_context(s, r, i, j, sid, shared)
            if r.get("target") is None and set_tgt is not None:
                tgt = set_tgt
                span = r.get("span") if r.get("span") is not None else s.get("span")
            else:
                tgt = decode_tokens(r.get("target"), f"set {i} row {j} target")
                span = r.get("span")
            a, b = _range(span, f"set {i} row {j} span")
            if a < 0 or b > len(tgt) or a >= b:
                raise bad(f"set {i} row {j}: span [{a}, {b}) is not a non-empty range inside the target "
                          f"of {len(tgt)} tokens", i, sid)
            if not ctx and a == 0:
                raise bad(f"set {i} row {j}: empty context and span starting at 0: the first scored token "
                          "needs a token before it", i, sid)
            k = _bad_token(ctx, V)
            if k >= 0:
                raise bad(f"set {i} row {j}: context token {ctx[k]} (index {k}) is outside the vocabulary "
                          f"[0, {V})", i, sid)
            k = _bad_token(tgt, V)
            if k >= 0:
                raise bad(f"set {i} row {j}: target token {tgt[k]} (index {k}) is outside the vocabulary "
                          f"[0, {V})", i, sid)
            if MC > 0 and len(tgt) > MC:
                raise bad(f"set {i} row {j}: target of {len(tgt)} tokens alone exceeds the model's max "
                          f"context {MC}", i, sid)
            temp = r.get("temperature")
            if temp is None:
                temp = 1.0
            elif isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp <= 0:
                raise bad(f"set {i} row {j}: temperature {temp!r} must be a finite number > 0 (leave it out "
                          "for 1)", i, sid)
            ref = _reference(r, stat, i, j, sid, V)
            if ref is None:
                parsed.append((ctx, tgt, (a, b), float(temp)))
            else:
                parsed.append((ctx, tgt, (a, b), float(temp), ref))
        out.append((sid, parsed, stat) if statistics else (sid, parsed))
    return out


def parse_attention_request(req, info, limits=None):
    """Decodes and validates an attention request (scorer/local/validate.go validateJobs); limits as
    in parse_score_request. Returns [(id, tokens, [((a0, a1), (o0, o1) or None)], layers)]."""
    if not isinstance(req, dict) or not isinstance(req.get("jobs"), list):
        raise bad('attention request must be an object with a "jobs" list')
    if limits:
        limits(len(req["jobs"]), sum(_estimated_tokens(j.get("tokens")) for j in req["jobs"] if isinstance(j, dict)))
    V, MC, NL = info["vocab_size"], info["max_context"], info["layers"]
    out = []
    for i, jb in enumerate(req["jobs"]):
        if not isinstance(jb, dict):
            raise bad(f"job {i} is not an object", i)
        jid = jb.get("id") or ""
        if not isinstance(jid, str):
            raise bad(f"job {i}: id must be a string", i)
        toks = decode_tokens(jb.get("tokens"), f"job {i} tokens")
        n = len(toks)
        if n == 0:
            raise bad(f"job {i} has no tokens", i, jid)
        if MC > 0 and n > MC:
            raise bad(f"job {i} has {n} tokens, more than the model's max context {MC}", i, jid)
        k = _bad_token(toks, V)
        if k >= 0:
            raise bad(f"job {i}: token {toks[k]} (index {k}) is outside the vocabulary [0, {V})", i, jid)
        steps = jb.get("steps")
        if not isinstance(steps, list) or not steps:
            raise bad(f"job {i} has no steps", i, jid)
        end = 0
        parsed = []
        for k, stp in enumerate(steps):
            if not isinstance(stp, dict):
                raise bad(f"job {i} step {k} is not an object", i, jid)
            s, e = _range(stp.get("action"), f"job {i} step {k} action")
            if s < end or e < s or e > n:
                raise bad(f"job {i} step {k}: action range [{s}, {e}) must lie after the previous step "
                          f"({end}) and inside the {n} tokens, start <= end", i, jid)
            end = e
            obs = None
            if stp.get("observation") is not None:
                os_, oe = _range(stp["observation"], f"job {i} step {k} observation")
                if oe != os_:
                    if os_ < end or oe < os_ or oe > n:
                        raise bad(f"job {i} step {k}: observation range [{os_}, {oe}) must follow the action "
                                  f"({end}) and lie inside the {n} tokens", i, jid)
                    end = oe
                    obs = (os_, oe)
            parsed.append(((s, e), obs))
        layers = jb.get("layers")
        if not isinstance(layers, list) or not layers:
            raise bad(f"job {i} asks for no layers", i, jid)
        for l in layers:
            if not isinstance(l, int) or isinstance(l, bool) or not 0 <= l < NL:
                raise bad(f"job {i}: layer {l} is outside the model's layers [0, {NL})", i, jid)
        out.append((jid, toks, parsed, layers))
    return out
