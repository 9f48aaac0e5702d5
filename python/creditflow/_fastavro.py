"""creditflow's records decoded by fastavro, the well-kept Avro library for Python: the
reference the package's own decoder (_avro, _avro_fast) is held to, and the alternative
`loadtest bench` measures it against in its trainer phase (docs/performance.md, Method, item 9).

Same framing and schema resolution as creditflow.wire (docs/wire-format.md): the 10-byte
single-object header names the writer schema by fingerprint, any generation the package reads;
fastavro resolves it to the current schema. decode_sample returns what wire.decode_sample
returns, with the packed arrays as read-only numpy views of the bytes fastavro read them into
(a copy of each array; wire.decode_sample's are views of the input). Bodies fastavro refuses
raise WireError("undecodable"), whatever fastavro raised.

The package decodes with its own decoder, which is faster (docs/performance.md, "The trainer's end").
"""

import io
import json

import numpy as np
from fastavro import parse_schema, schemaless_reader

from .wire import MAGIC, WireError, _PACKED, codec

__all__ = ["Reader", "decode", "decode_sample"]


class Reader:
    """Every writer schema of record `name` that creditflow.wire reads, parsed for fastavro,
    keyed by fingerprint, each resolving to the current schema."""

    def __init__(self, name):
        c = codec(name)
        self.name = name
        current = parse_schema(json.loads(c.current.text))
        self._schemas = {}
        for fp, s in c.readers.items():
            w = current if s is c.current else parse_schema(json.loads(s.text))
            self._schemas[fp] = (w, None if s is c.current else current)
        self._fullname = c.fullname
        self._current_fp = c.current.fingerprint

    def decode(self, value):
        """The record of a framed value, as a dict (bytes fields as bytes)."""
        if not isinstance(value, bytes):
            value = bytes(value)
        if len(value) < 10 or value[:2] != MAGIC:
            raise WireError("undecodable", "not Avro single-object encoded (want the C3 01 marker and an 8-byte fingerprint)")
        s = self._schemas.get(value[2:10])
        if s is None:
            raise WireError("unknown_schema", "fingerprint %s is not a known %s schema (current %s)"
                            % (value[2:10].hex(), self._fullname, self._current_fp.hex()))
        fo = io.BytesIO(value)
        fo.seek(10)
        try:
            rec = schemaless_reader(fo, s[0], s[1])
        except Exception as e:  # fastavro's own errors: EOFError, ValueError, UnicodeDecodeError, ...
            raise WireError("undecodable", "fastavro: %s: %s" % (type(e).__name__, e)) from None
        if fo.tell() != len(value):
            raise WireError("undecodable", "%d trailing bytes after the record" % (len(value) - fo.tell()))
        return rec


_readers = {}


def decode(name, value):
    """The record `name` ("Sample", "Scored", "Trajectory", ...) of a framed value, decoded by
    fastavro: what creditflow.wire.codec(name).decode(value) returns, bytes fields as bytes
    (the package's decoder gives memoryviews)."""
    r = _readers.get(name)
    if r is None:
        r = _readers[name] = Reader(name)
    return r.decode(value)


_SAMPLE_ARRAYS = tuple((f, np.dtype(dt)) for f, dt in _PACKED["Sample"].items())


def decode_sample(value):
    """creditflow.decode_sample through fastavro: the same dict, the same checks."""
    r = decode("Sample", value)
    n = None
    for f, dt in _SAMPLE_ARRAYS:
        b = r[f]
        if b is None:
            continue
        if len(b) % dt.itemsize:
            raise WireError("undecodable", "packed %s field %s of %d bytes is not a multiple of %d"
                            % (dt.name, f, len(b), dt.itemsize))
        a = r[f] = np.frombuffer(b, dt)
        if n is None:
            n = a.size
        elif a.size != n:
            raise WireError("undecodable", "%s has %d entries for %d tokens" % (f, a.size, n))
    return r
