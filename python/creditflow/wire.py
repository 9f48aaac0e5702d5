"""Records on the wire: Avro single-object encoding of creditflow's schemas (docs/wire-format.md).

Every value is ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of the writer schema + the Avro
body. Decoders know every writer schema creditflow has published (the current ones and those
of release ``aeddc48``) and resolve them to the current schema: fields a writer lacks take
their defaults, so old records keep decoding.

Packed arrays (token ids, masks, advantages, log-probs) decode to read-only numpy views of the
input bytes: no copy (``np.frombuffer``).
"""

import os

import numpy as np

from . import _native
from ._avro import DecodeError, Schema
from ._avro_fast import FALLBACK

__all__ = [
    "MAGIC", "HEADER_SCHEMA", "LEGACY", "AUTO", "CURRENT", "WireError",
    "encode_trajectory", "decode_trajectory", "decode_sample", "decode_scored",
    "encode_policy", "decode_policy", "decode_dead_letter", "schema_of", "schema_text",
]

MAGIC = b"\xc3\x01"
HEADER_SCHEMA = "creditflow-schema"
#: Writer-schema generation of the records written before policy versions (release aeddc48).
LEGACY = "aeddc48"
#: Later writer-schema generations still decoded, per record: Scored of release 8017725
#: (Trajectory.source, step graphs K×K in ``attention`` only; schemas/v2/ in the repository)
#: and of release e4323a4 (compact graphs as G_AA and G_AO only, before the sum form;
#: schemas/v3/).
LATER = {"Scored": ("8017725", "e4323a4")}
#: encode_trajectory's default writer: the oldest generation that can hold the record.
AUTO = "auto"
CURRENT = "current"

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
_FILES = {"Trajectory": "trajectory.avsc", "Scored": "scored.avsc", "Sample": "sample.avsc",
          "DeadLetter": "dead_letter.avsc", "PolicyAnnouncement": "policy.avsc"}


class WireError(ValueError):
    """A value that cannot be decoded. ``reason`` is the dead-letter reason code the Go
    processor uses for the same input: ``undecodable`` or ``unknown_schema``."""

    def __init__(self, reason, detail):
        super().__init__("%s: %s" % (reason, detail))
        self.reason, self.detail = reason, detail


def schema_text(name, generation=None):
    """The .avsc text of record `name` (e.g. "Sample"), current or of an older generation."""
    d = SCHEMA_DIR if generation is None else os.path.join(SCHEMA_DIR, generation)
    with open(os.path.join(d, _FILES[name]), encoding="utf-8") as f:
        return f.read()


# Bytes fields that decode to numpy arrays (decode(..., packed=True)), per record.
_PACKED = {"Sample": {"tokens": "<i4", "loss_mask": "u1", "advantages": "<f4", "token_rewards": "<f4",
                      "rollout_logprobs": "<f4"}}


class _Codec:
    def __init__(self, name):
        self.name = name
        packed = _PACKED.get(name)
        self.current = Schema(schema_text(name), packed=packed)
        self.fullname = self.current.fullname
        self.header = MAGIC + self.current.fingerprint
        self.readers = {self.current.fingerprint: self.current}
        self.writers = {None: self.current}
        old_dir = os.path.join(SCHEMA_DIR, LEGACY)
        if os.path.exists(os.path.join(old_dir, _FILES[name])):
            old = Schema(schema_text(name, LEGACY), reader=self.current, packed=packed)
            self.readers.setdefault(old.fingerprint, old)
            self.writers[LEGACY] = old
        for gen in LATER.get(name, ()):
            later = Schema(schema_text(name, gen), reader=self.current, packed=packed)
            self.readers.setdefault(later.fingerprint, later)
            self.writers[gen] = later

    def encode(self, datum, writer=None):
        if writer == CURRENT:
            writer = None
        try:
            s = self.writers[writer]
        except KeyError:
            raise ValueError("unknown writer generation %r for %s (want None or %r)" % (writer, self.name, LEGACY)) from None
        return MAGIC + s.fingerprint + s.encode_body(datum)

    def decode(self, data, packed=False):
        if not isinstance(data, bytes):
            data = bytes(data)
        if len(data) < 10 or data[:2] != MAGIC:
            raise WireError("undecodable", "not Avro single-object encoded (want the C3 01 marker and an 8-byte fingerprint)")
        s = self.readers.get(data[2:10])
        if s is None:
            raise WireError("unknown_schema", "fingerprint %s is not a known %s schema (current %s)"
                            % (data[2:10].hex(), self.fullname, self.current.fingerprint.hex()))
        try:
            rec, end = s.decode_body(data, 10, packed)
        except DecodeError as e:
            raise WireError("undecodable", str(e)) from None
        if end != len(data):
            raise WireError("undecodable", "%d trailing bytes after the record" % (len(data) - end))
        return rec


_codecs = {}


def codec(name):
    c = _codecs.get(name)
    if c is None:
        c = _codecs[name] = _Codec(name)
    return c


def schema_of(value):
    """The full record name of a framed value ("io.creditflow.v1.Sample"), or "" when the
    fingerprint is not one of creditflow's."""
    if len(value) < 10 or value[:2] != MAGIC:
        return ""
    fp = bytes(value[2:10])
    for name in _FILES:
        c = codec(name)
        if fp in c.readers:
            return c.fullname
    return ""


# ----- packed arrays ---------------------------------------------------------------------

_I32, _F32, _F64, _U8 = np.dtype("<i4"), np.dtype("<f4"), np.dtype("<f8"), np.dtype("u1")


def _view(mv, dtype, field):
    if mv is None or isinstance(mv, np.ndarray):  # None, or already a view (decode(packed=True))
        return mv
    if len(mv) % dtype.itemsize:
        raise WireError("undecodable", "packed %s field %s of %d bytes is not a multiple of %d"
                        % (dtype.name, field, len(mv), dtype.itemsize))
    return np.frombuffer(mv, dtype=dtype)


def _pack(values, dtype, field):
    if values is None:
        return None
    if isinstance(values, (bytes, bytearray, memoryview)):
        return bytes(values)
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError("%s must be one-dimensional, got shape %s" % (field, a.shape))
    if dtype.kind == "i":
        if a.size and a.dtype.kind not in "iub":
            raise TypeError("%s must hold integers, got %s" % (field, a.dtype))
        if a.size and (a.min() < -(1 << 31) or a.max() >= (1 << 31)):
            raise ValueError("%s holds a value outside int32" % field)
    return a.astype(dtype, copy=False).tobytes()


# ----- Trajectory ------------------------------------------------------------------------

def encode_trajectory(t: dict, writer=AUTO) -> bytes:
    """Frames a trajectory dict (as build_trajectory returns it).

    Token fields may be lists, numpy arrays or already-packed bytes; ``gold_span`` may be
    given as ``(a, b)`` or as ``gold_span_start``/``gold_span_end``.

    The writer schema: ``AUTO`` (default) writes the oldest schema generation that holds the
    record, so a trajectory without ``source`` is written with the schema of release
    aeddc48 and is accepted by processors of every release (current ones resolve it, with
    ``source`` = null); one with ``source`` is written with the current schema.
    ``CURRENT`` always writes the current schema; ``LEGACY`` always the old one (it refuses
    a trajectory that sets ``source``). Same input and writer, same bytes.
    """
    span = t.get("gold_span")
    a, b = (span[0], span[1]) if span is not None else (t.get("gold_span_start", 0), t.get("gold_span_end", 0))
    turns = []
    for i, tu in enumerate(t["turns"]):
        turns.append({"kind": tu["kind"], "action": _pack(tu["action"], _I32, "turns[%d].action" % i),
                      "observation": _pack(tu.get("observation") if tu.get("observation") is not None else b"",
                                           _I32, "turns[%d].observation" % i)})
    reward = t.get("reward")
    temp = t.get("temperature")
    rec = {
        "trajectory_id": t["trajectory_id"], "prompt_id": t["prompt_id"],
        "group_size": int(t["group_size"]), "sample_index": int(t["sample_index"]),
        "policy_version": int(t["policy_version"]), "created_at_ms": int(t["created_at_ms"]),
        "prompt": _pack(t["prompt"], _I32, "prompt"),
        "turns": turns,
        "reward": None if reward is None else float(reward),
        "pred_answer": t.get("pred_answer"),
        "gold_answers": list(t.get("gold_answers") or []),
        "gold_target": _pack(t.get("gold_target") if t.get("gold_target") is not None else b"", _I32, "gold_target"),
        "gold_span_start": int(a), "gold_span_end": int(b),
        "rollout_logprobs": _pack(t.get("rollout_logprobs"), _F32, "rollout_logprobs"),
        "temperature": None if temp is None else float(temp),
        "source": t.get("source"),
    }
    if writer == AUTO:
        writer = LEGACY if rec["source"] is None else CURRENT
    if writer == LEGACY and rec["source"] is not None:
        raise ValueError("source is set but writer=%r has no source field; drop one of them" % LEGACY)
    return codec("Trajectory").encode(rec, writer)


def _trajectory_arrays(r):
    r["prompt"] = _view(r["prompt"], _I32, "prompt")
    for i, tu in enumerate(r["turns"]):
        tu["action"] = _view(tu["action"], _I32, "turns[%d].action" % i)
        tu["observation"] = _view(tu["observation"], _I32, "turns[%d].observation" % i)
    r["gold_target"] = _view(r["gold_target"], _I32, "gold_target")
    r["gold_span"] = (r["gold_span_start"], r["gold_span_end"])
    r["rollout_logprobs"] = _view(r["rollout_logprobs"], _F32, "rollout_logprobs")
    return r


def decode_trajectory(value: bytes) -> dict:
    """Decodes a framed Trajectory; token and log-prob fields become numpy views."""
    return _trajectory_arrays(codec("Trajectory").decode(value))


# ----- Scored ----------------------------------------------------------------------------

def decode_scored(value: bytes) -> dict:
    """Decodes a framed Scored record; ``aa``/``ao`` of ``attention`` (records of earlier
    generations) become K×K float64 numpy views, those of ``graphs`` (the compact form the
    score stage writes: the K(K-1)/2 entries below the diagonal, row by row, entry [j, k] at
    j(j-1)/2 + k) one-dimensional float64 views. A compact graph holds either ``aa`` and
    ``ao`` (``sum`` is None) or, in the sum form, only ``sum`` = G_AA + G_AO (``aa`` and
    ``ao`` are None); AttnSR reads the pair only as 0.5·aa + 0.5·ao and aa + ao."""
    r = codec("Scored").decode(value)
    _trajectory_arrays(r["trajectory"])
    for g in r["attention"]:
        k = g["k"]
        for f in ("aa", "ao"):
            m = _view(g[f], _F64, f)
            if m.size != k * k:
                raise WireError("undecodable", "layer %d %s has %d entries, want K*K = %d" % (g["layer"], f, m.size, k * k))
            g[f] = m.reshape(k, k) if k else m
    for g in r["graphs"]:
        k = g["k"]
        present, absent = (("sum",), ("aa", "ao")) if len(g["sum"]) else (("aa", "ao"), ("sum",))
        for f in absent:
            if len(g[f]):
                raise WireError("undecodable", "layer %d holds both sum and %s" % (g["layer"], f))
            g[f] = None
        for f in present:
            m = _view(g[f], _F64, f)
            if m.size != k * (k - 1) // 2:
                raise WireError("undecodable", "layer %d %s has %d entries, want K(K-1)/2 = %d" % (g["layer"], f, m.size, k * (k - 1) // 2))
            g[f] = m
    return r


# ----- Sample ----------------------------------------------------------------------------

# Sample writer fingerprint -> the straight-line decoder of a whole framed Sample
# (Schema.fast_whole), filled by the first decode_sample; with the compiled decoder
# (creditflow._native), [its decode_framed, ((fingerprint, program), ...)] instead.
_SAMPLE_WHOLE = {}
_SAMPLE_NATIVE = []


def decode_sample(value: bytes) -> dict:
    """Decodes a framed Sample (current or older schema) into a dict.

    ``tokens`` (int32), ``loss_mask`` (uint8), ``advantages``, ``token_rewards`` and
    ``rollout_logprobs`` (float32, None when absent) are read-only numpy views of `value`
    (zero-copy). ``scorer_policy_version`` and ``source`` are None for records written
    before they existed. Raises WireError (reason undecodable or unknown_schema).
    """
    if value.__class__ is not bytes:
        value = bytes(value)
    # The trainer's path: one call for a well-formed record (the header, the body, its end and
    # the arrays' counts checked on the way); anything else takes the checking path below,
    # which decodes it the same or says why not.
    if _SAMPLE_NATIVE:
        try:
            s = _SAMPLE_NATIVE[0](_SAMPLE_NATIVE[1], value)
        except FALLBACK:
            s = None
        if s is not None:
            return s
    else:
        fast = _SAMPLE_WHOLE.get(value[2:10]) if value[:2] == MAGIC else None
        if fast is not None:
            try:
                return fast(value, memoryview(value), 10)[0]
            except FALLBACK:
                pass
    return _decode_sample_checked(value)


def _decode_sample_checked(value):
    c = codec("Sample")
    if not _SAMPLE_WHOLE:
        _SAMPLE_WHOLE.update((fp, s.fast_whole) for fp, s in c.readers.items())
        mod = _native.module()
        if mod is not None:
            _SAMPLE_NATIVE[:] = [mod.decode_framed, tuple((fp, (_native.program(s.json, s.reader_json, s.packed), True))
                                                          for fp, s in c.readers.items())]
    r = c.decode(value, packed=True)
    n = None
    for f, dt in (("tokens", _I32), ("loss_mask", _U8), ("advantages", _F32),
                  ("token_rewards", _F32), ("rollout_logprobs", _F32)):
        a = _view(r[f], dt, f)
        r[f] = a
        if a is None:
            continue
        if n is None:
            n = a.size
        elif a.size != n:
            raise WireError("undecodable", "%s has %d entries for %d tokens" % (f, a.size, n))
    return r


# ----- PolicyAnnouncement and DeadLetter ---------------------------------------------------

def encode_policy(version: int, checkpoint: str = "", announced_at_ms: int = 0) -> bytes:
    """Frames a PolicyAnnouncement."""
    if int(version) < 0:
        raise ValueError("policy version %d must be >= 0" % version)
    return codec("PolicyAnnouncement").encode({"version": int(version), "checkpoint": checkpoint or "",
                                               "announced_at_ms": int(announced_at_ms)})


def decode_policy(value: bytes) -> dict:
    """Decodes a framed PolicyAnnouncement: {"version", "checkpoint", "announced_at_ms"}."""
    return codec("PolicyAnnouncement").decode(value)


def decode_dead_letter(value: bytes) -> dict:
    """Decodes a framed DeadLetter; ``key``/``value`` are bytes (or None)."""
    r = codec("DeadLetter").decode(value)
    for f in ("key", "value"):
        if r[f] is not None:
            r[f] = bytes(r[f])
    return r
