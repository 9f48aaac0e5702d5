"""A small Avro binary codec for creditflow's schemas (docs/wire-format.md).

It covers what the schemas use: records, arrays, two-branch ``["null", T]`` unions and the
primitive types (no maps, enums or fixed). Schemas are compiled once into closures, and each
record schema also into one straight-line function (_avro_fast) that decodes well-formed bodies
and leaves everything else to the closures, which check every byte.

- Encoding is deterministic and byte-identical to the Go codecs: fields in schema order,
  a non-empty array as one block followed by the 0 terminator, a union as branch index +
  value.
- Decoding is zero-copy for ``bytes``: a bytes field decodes to a ``memoryview`` slice of the
  input, so packed arrays become numpy views without a copy. Every length is checked
  against the bytes that remain before anything is sliced.
- Schema resolution for the evolutions creditflow makes (fields appended with defaults):
  a record written with an older schema decodes into the current reader schema, and the
  reader's fields the writer lacks take their defaults.

Measured against python3-avro in ``python/tests/bench_decode.py`` (see docs/python.md).
"""

import json
import struct

from ._avro_fast import FALLBACK, compile_decoder

__all__ = ["Schema", "canonical_form", "fingerprint", "DecodeError"]


class DecodeError(ValueError):
    """A body that does not parse against its schema (reason ``undecodable``)."""

    reason = "undecodable"


PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")

# ----- Parsing Canonical Form and CRC-64-AVRO --------------------------------------------

_EMPTY = 0xC15D213AA4D7A795
_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_EMPTY & -(_fp & 1))
    _TABLE.append(_fp & 0xFFFFFFFFFFFFFFFF)


def rabin(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) fingerprint, as the Avro specification defines it."""
    fp = _EMPTY
    for b in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ b) & 0xFF]
    return fp


def _fullname(name, namespace):
    if "." in name or not namespace:
        return name
    return namespace + "." + name


def _pcf(node, namespace, seen):
    if isinstance(node, str):
        if node in PRIMITIVES:
            return json.dumps(node)
        return json.dumps(_fullname(node, namespace))
    if isinstance(node, list):
        return "[" + ",".join(_pcf(b, namespace, seen) for b in node) + "]"
    t = node["type"]
    if t in PRIMITIVES:
        return json.dumps(t)
    if t == "record":
        ns = node.get("namespace", namespace)
        full = _fullname(node["name"], ns)
        if "." in full:
            ns = full.rsplit(".", 1)[0]
        if full in seen:
            return json.dumps(full)
        seen.add(full)
        fields = ",".join('{"name":%s,"type":%s}' % (json.dumps(f["name"]), _pcf(f["type"], ns, seen))
                          for f in node["fields"])
        return '{"name":%s,"type":"record","fields":[%s]}' % (json.dumps(full), fields)
    if t == "array":
        return '{"type":"array","items":%s}' % _pcf(node["items"], namespace, seen)
    raise ValueError("schema type %r is not used by creditflow schemas" % (t,))


def canonical_form(schema) -> str:
    """Parsing Canonical Form of a schema (JSON text or parsed), as the Avro spec defines it."""
    if isinstance(schema, (str, bytes)):
        schema = json.loads(schema)
    return _pcf(schema, "", set())


def fingerprint(schema) -> bytes:
    """The 8 bytes of the CRC-64-AVRO fingerprint of the canonical form, little-endian."""
    return struct.pack("<Q", rabin(canonical_form(schema).encode("utf-8")))


# ----- encoding --------------------------------------------------------------------------

def _varint(n):
    u = (n << 1) ^ (n >> 63)
    u &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_pack_f, _pack_d = struct.Struct("<f").pack, struct.Struct("<d").pack


def _enc_compile(node, named, path):
    if isinstance(node, str):
        if node in named:
            return named[node][0]
        node = {"type": node}
    if isinstance(node, list):
        if len(node) != 2 or node[0] != "null":
            raise ValueError("only [\"null\", T] unions are supported")
        inner = _enc_compile(node[1], named, path)

        def enc_union(v, out, p=path):
            if v is None:
                out.append(b"\x00")
            else:
                out.append(b"\x02")
                inner(v, out)
        return enc_union
    t = node["type"]
    if t == "null":
        return lambda v, out: None
    if t == "boolean":
        return lambda v, out: out.append(b"\x01" if v else b"\x00")
    if t in ("int", "long"):
        lo, hi = (-(1 << 31), (1 << 31) - 1) if t == "int" else (-(1 << 63), (1 << 63) - 1)

        def enc_int(v, out, p=path):
            if isinstance(v, bool) or not isinstance(v, int):
                v = _as_int(v, p)
            if not lo <= v <= hi:
                raise ValueError("%s: %d out of the %s range" % (p, v, t))
            out.append(_varint(v))
        return enc_int
    if t == "float":
        return lambda v, out: out.append(_pack_f(v))
    if t == "double":
        return lambda v, out: out.append(_pack_d(v))
    if t == "bytes":
        def enc_bytes(v, out, p=path):
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError("%s: want bytes, got %s" % (p, type(v).__name__))
            v = bytes(v)
            out.append(_varint(len(v)))
            out.append(v)
        return enc_bytes
    if t == "string":
        def enc_string(v, out, p=path):
            if not isinstance(v, str):
                raise TypeError("%s: want str, got %s" % (p, type(v).__name__))
            b = v.encode("utf-8")
            out.append(_varint(len(b)))
            out.append(b)
        return enc_string
    if t == "array":
        item = _enc_compile(node["items"], named, path + "[]")

        def enc_array(v, out):
            if v:
                out.append(_varint(len(v)))
                for x in v:
                    item(x, out)
            out.append(b"\x00")
        return enc_array
    if t == "record":
        fields = []
        holder = [None]

        def enc_record(v, out):
            return holder[0](v, out)
        named[node["name"]] = (enc_record,)
        for f in node["fields"]:
            has_default = "default" in f
            default = f.get("default")
            if f["type"] == "bytes" and isinstance(default, str):  # JSON gives a bytes default as code points 0-255
                default = default.encode("latin-1")
            fields.append((f["name"], _enc_compile(f["type"], named, path + "." + f["name"] if path else f["name"]),
                           has_default, default))

        def enc_fields(v, out):
            for name, enc, has_default, default in fields:
                if name in v:
                    x = v[name]
                elif has_default:
                    x = default
                else:
                    raise KeyError("%s: required field %r missing" % (node["name"], name))
                enc(x, out)
        holder[0] = enc_fields
        return enc_record
    raise ValueError("schema type %r is not used by creditflow schemas" % (t,))


def _as_int(v, path):
    try:
        import numbers
        if isinstance(v, numbers.Integral):
            return int(v)
    except ImportError:  # pragma: no cover
        pass
    raise TypeError("%s: want an integer, got %s" % (path, type(v).__name__))


# ----- decoding --------------------------------------------------------------------------

def _read_varint(b, pos, maxbytes):
    u = 0
    shift = 0
    n = len(b)
    for _ in range(maxbytes):
        if pos >= n:
            raise DecodeError("varint runs past the end at byte %d" % pos)
        c = b[pos]
        pos += 1
        u |= (c & 0x7F) << shift
        if c < 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
    raise DecodeError("varint longer than %d bytes at byte %d" % (maxbytes, pos))


_unpack_f = struct.Struct("<f").unpack_from
_unpack_d = struct.Struct("<d").unpack_from


def _dec_union(inner, path):
    """Decoder of a ["null", T] union whose T decodes with `inner`."""
    def dec_union(b, mv, pos, p=path):
        c = b[pos] if pos < len(b) else 0x80
        if c < 0x80:  # a one-byte varint, as every branch index is: no call
            i, pos = (c >> 1) ^ -(c & 1), pos + 1
        else:
            i, pos = _read_varint(b, pos, 10)
        if i == 0:
            return None, pos
        if i == 1:
            return inner(b, mv, pos)
        raise DecodeError("%s: union index %d out of range [0, 2)" % (p, i))
    return dec_union


def _dec_array(item, path):
    """Decoder of an array whose items decode with `item` (blocks with or without sizes)."""
    def dec_array(b, mv, pos, p=path):
        out = []
        while True:
            n, pos = _read_varint(b, pos, 10)
            if n == 0:
                return out, pos
            if n < 0:
                n = -n
                size, pos = _read_varint(b, pos, 10)
                if size < 0 or size > len(b) - pos:
                    raise DecodeError("%s: block size %d does not fit" % (p, size))
            if n > len(b) - pos:
                raise DecodeError("%s: block count %d does not fit in the %d bytes that remain"
                                  % (p, n, len(b) - pos))
            for _ in range(n):
                v, pos = item(b, mv, pos)
                out.append(v)
    return dec_array


def _dec_compile(node, named, path):
    """Compiles a decoder: fn(buf, mv, pos) -> (value, pos). buf is bytes, mv its memoryview."""
    if isinstance(node, str):
        if node in named:
            return named[node][0]
        node = {"type": node}
    if isinstance(node, list):
        return _dec_union(_dec_compile(node[1], named, path), path)
    t = node["type"]
    if t == "null":
        return lambda b, mv, pos: (None, pos)
    if t == "boolean":
        def dec_bool(b, mv, pos, p=path):
            if pos >= len(b):
                raise DecodeError("%s: boolean past the end" % p)
            c = b[pos]
            if c > 1:
                raise DecodeError("%s: boolean byte %#x is neither 0 nor 1" % (p, c))
            return c == 1, pos + 1
        return dec_bool
    if t == "int":
        def dec_int(b, mv, pos, p=path):
            c = b[pos] if pos < len(b) else 0x80
            if c < 0x80:
                return (c >> 1) ^ -(c & 1), pos + 1
            v, pos = _read_varint(b, pos, 5)
            if not -(1 << 31) <= v < (1 << 31):
                raise DecodeError("%s: int %d out of 32-bit range" % (p, v))
            return v, pos
        return dec_int
    if t == "long":
        return lambda b, mv, pos: _read_varint(b, pos, 10)
    if t in ("float", "double"):
        size, unpack = (4, _unpack_f) if t == "float" else (8, _unpack_d)

        def dec_float(b, mv, pos, p=path):
            if len(b) - pos < size:
                raise DecodeError("%s: %s needs %d bytes, %d remain" % (p, t, size, len(b) - pos))
            return unpack(b, pos)[0], pos + size
        return dec_float
    if t in ("bytes", "string"):
        is_str = t == "string"

        def dec_bytes(b, mv, pos, p=path):
            c = b[pos] if pos < len(b) else 0x80
            if c < 0x80:  # lengths under 64: kinds, ids, short strings
                n, pos = (c >> 1) ^ -(c & 1), pos + 1
            else:
                n, pos = _read_varint(b, pos, 10)
            end = pos + n
            if n < 0 or end > len(b):
                raise DecodeError("%s: length %d does not fit in the %d bytes that remain" % (p, n, len(b) - pos))
            if is_str:
                try:
                    return str(mv[pos:end], "utf-8"), end
                except UnicodeDecodeError as e:
                    raise DecodeError("%s: string is not UTF-8: %s" % (p, e)) from None
            return mv[pos:end], end
        return dec_bytes
    if t == "array":
        return _dec_array(_dec_compile(node["items"], named, path + "[]"), path)
    raise ValueError("schema type %r is not used by creditflow schemas" % (t,))


def _dec_record(writer, reader, named, path):
    """Decoder of a record written with `writer` and read as `reader` (same name; the reader
    may have more fields, which take their defaults)."""
    holder = [None]

    def dec(b, mv, pos):
        return holder[0](b, mv, pos)
    named[writer["name"]] = (dec,)
    rfields = {f["name"]: f for f in reader["fields"]}
    steps = []
    for f in writer["fields"]:
        rf = rfields.get(f["name"])
        steps.append((f["name"] if rf is not None else None, _dec_node(f["type"], rf["type"] if rf else f["type"],
                                                                      named, path + "." + f["name"])))
    wnames = {f["name"] for f in writer["fields"]}
    defaults = []
    for f in reader["fields"]:
        if f["name"] not in wnames:
            if "default" not in f:
                raise ValueError("reader field %s.%s has no default and the writer lacks it" % (reader["name"], f["name"]))
            defaults.append((f["name"], f["default"]))

    def dec_fields(b, mv, pos):
        out = {}
        for name, d in steps:
            v, pos = d(b, mv, pos)
            if name is not None:
                out[name] = v
        for name, dv in defaults:
            out[name] = list(dv) if isinstance(dv, list) else dv
        return out, pos
    holder[0] = dec_fields
    return dec


def _find_record(node):
    if isinstance(node, dict) and node.get("type") == "record":
        return node
    if isinstance(node, list):
        for b in node:
            r = _find_record(b)
            if r is not None:
                return r
    if isinstance(node, dict) and node.get("type") == "array":
        return _find_record(node["items"])
    return None


def _dec_node(wnode, rnode, named, path):
    wr = wnode if isinstance(wnode, dict) and wnode.get("type") == "record" else None
    if wr is not None:
        rr = rnode if isinstance(rnode, dict) and rnode.get("type") == "record" else wr
        return _dec_record(wr, rr, named, path)
    if isinstance(wnode, list):
        inner_w = wnode[1]
        inner_r = rnode[1] if isinstance(rnode, list) else inner_w
        return _dec_union(_dec_node(inner_w, inner_r, named, path), path)
    if isinstance(wnode, dict) and wnode.get("type") == "array":
        ri = rnode["items"] if isinstance(rnode, dict) and rnode.get("type") == "array" else wnode["items"]
        if _find_record(wnode["items"]) is not None:
            return _dec_array(_dec_node(wnode["items"], ri, named, path + "[]"), path)
    return _dec_compile(wnode, named, path)


class Schema:
    """One parsed schema: its canonical form, fingerprint, encoder, and decoder into `reader`
    (default: itself). With `packed` (top-level bytes field -> numpy dtype),
    decode_body(..., packed=True) returns those fields as numpy views."""

    def __init__(self, text, reader=None, packed=None):
        self.text = text
        self.json = json.loads(text)
        self.name = self.json["name"]
        self.fullname = _fullname(self.name, self.json.get("namespace", ""))
        self.canonical = canonical_form(self.json)
        self.fingerprint = struct.pack("<Q", rabin(self.canonical.encode("utf-8")))
        self._enc = _enc_compile(self.json, {}, "")
        rjson = reader.json if reader is not None else self.json
        if _fullname(rjson["name"], rjson.get("namespace", "")) != self.fullname:
            raise ValueError("cannot read %s as %s" % (self.fullname, rjson["name"]))
        self.reader_json, self.packed = rjson, packed
        self._dec = _dec_record(self.json, rjson, {}, "")
        self._fast = compile_decoder(self.json, rjson)
        self._fast_packed = compile_decoder(self.json, rjson, packed) if packed else None
        # fn(data, mv, pos) -> (dict, end) for data[pos:] that is exactly one record whose packed
        # fields are numpy views of one count (wire.decode_sample); raises one of FALLBACK where
        # decode_body must decide
        self.fast_whole = compile_decoder(self.json, rjson, packed, whole=True) if packed else None

    def encode_body(self, datum: dict) -> bytes:
        out = []
        self._enc(datum, out)
        return b"".join(out)

    def decode_body(self, data, pos=0, packed=False):
        """Decodes one record from data[pos:]; returns (dict, end position). With packed, the
        packed fields are numpy views where the fast decoder could read the record and
        memoryviews where the checking decoder had to."""
        if not isinstance(data, bytes):
            data = bytes(data)
        mv = memoryview(data)
        try:
            return (self._fast_packed if packed and self._fast_packed else self._fast)(data, mv, pos)
        except FALLBACK:  # not what the fast decoder expects: the checking one decides
            return self._dec(data, mv, pos)
