"""Shared helpers for creditflow's wire format (see docs/wire-format.md).

Every record is Avro single-object encoded: b"\\xc3\\x01", the 8-byte
little-endian CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form,
then the Avro binary body. Token arrays are Avro bytes holding packed
little-endian int32 / float32 / float64 values.

Requires the `avro` package (Apache Avro: `pip install avro`; in the project's environment).
"""

import io
import struct
from pathlib import Path

import avro.io
import avro.schema

SCHEMA_DIR = Path(__file__).resolve().parent.parent.parent / "schemas"
MAGIC = b"\xc3\x01"

_EMPTY = 0xC15D213AA4D7A795
_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_EMPTY & -(_fp & 1))
    _TABLE.append(_fp & 0xFFFFFFFFFFFFFFFF)


def rabin_fingerprint(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) fingerprint, as the Avro specification defines it."""
    fp = _EMPTY
    for b in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ b) & 0xFF]
    return fp


def _fingerprint(schema) -> bytes:
    canonical = schema.canonical_form
    if isinstance(canonical, str):
        canonical = canonical.encode("utf-8")
    return struct.pack("<Q", rabin_fingerprint(canonical))


class SchemaCodec:
    """Encodes and decodes one record type in single-object encoding.

    Decoding also accepts records written with an earlier version of the
    schema (schemas/v1/<file>): they are resolved to the current schema, and
    fields the writer did not have take their defaults (docs/wire-format.md,
    "Schema evolution"). Encoding always writes the current schema.
    """

    def __init__(self, filename: str):
        text = (SCHEMA_DIR / filename).read_text()
        self.schema = avro.schema.parse(text)
        self.fingerprint = _fingerprint(self.schema)
        self.header = MAGIC + self.fingerprint
        self._writer = avro.io.DatumWriter(self.schema)
        self._readers = {self.fingerprint: avro.io.DatumReader(self.schema)}
        for old in sorted(SCHEMA_DIR.glob("v*/" + filename)):
            writer = avro.schema.parse(old.read_text())
            self._readers.setdefault(_fingerprint(writer), avro.io.DatumReader(writer, self.schema))

    def encode(self, datum: dict) -> bytes:
        buf = io.BytesIO()
        buf.write(self.header)
        self._writer.write(datum, avro.io.BinaryEncoder(buf))
        return buf.getvalue()

    def decode(self, data: bytes) -> dict:
        if len(data) < 10 or data[:2] != MAGIC:
            raise ValueError("undecodable: not Avro single-object encoded")
        reader = self._readers.get(bytes(data[2:10]))
        if reader is None:
            raise ValueError(
                "unknown_schema: fingerprint %s is not %s (%s)"
                % (data[2:10].hex(), self.schema.fullname, self.fingerprint.hex())
            )
        buf = io.BytesIO(data[10:])
        datum = reader.read(avro.io.BinaryDecoder(buf))
        if buf.tell() != len(data) - 10:
            raise ValueError("undecodable: trailing bytes after the record")
        return datum


def pack_i32(values) -> bytes:
    return struct.pack("<%di" % len(values), *values)


def pack_f32(values) -> bytes:
    return struct.pack("<%df" % len(values), *values)


def unpack_i32(data: bytes) -> list:
    if len(data) % 4:
        raise ValueError("undecodable: packed int32 field of %d bytes" % len(data))
    return list(struct.unpack("<%di" % (len(data) // 4), data))


def unpack_f32(data: bytes) -> list:
    if len(data) % 4:
        raise ValueError("undecodable: packed float32 field of %d bytes" % len(data))
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def unpack_f64(data: bytes) -> list:
    if len(data) % 8:
        raise ValueError("undecodable: packed float64 field of %d bytes" % len(data))
    return list(struct.unpack("<%dd" % (len(data) // 8), data))
