"""Straight-line decoders: a record schema (with the reader it resolves to) compiled into the
source of one Python function, so that decoding a record is one call instead of one closure
call per field: varints are read inline (unrolled), and runs of fixed-size fields by one
struct call.

The fast decoder only ever returns what the closure decoder of _avro would return for the same
bytes. It checks nothing it can leave to that decoder: whenever the bytes are not what it
expects (a length past the end, a bad union branch or boolean, an int out of range, a string
that is not UTF-8) it raises _Fallback and Schema.decode_body runs the closure decoder, which
gives the value or the precise DecodeError.
"""

import functools
import struct

import numpy as np

__all__ = ["compile_decoder"]


class _Fallback(Exception):
    """The bytes need the checking decoder."""


class _Gen:
    def __init__(self, named, packed=None, whole=False):
        self.lines, self.n, self.named, self.whole = [], 0, named, whole
        self.packed = packed or {}  # top-level bytes field -> numpy dtype (compile_decoder)
        self.depth = 0
        self.consts = {}

    def var(self, base):
        self.n += 1
        return "%s%d" % (base, self.n)

    def emit(self, ind, line):
        self.lines.append("    " * ind + line)

    def varint(self, ind, dst, maxbytes=10):
        # unrolled: a byte below 128 ends the varint (most lengths, counts and branches end
        # with the first); past maxbytes, the checking decoder decides
        c, u = self.var("c"), self.var("u")
        self.emit(ind, "%s = b[pos]" % c)
        self.emit(ind, "if %s < 128:" % c)
        self.emit(ind + 1, "%s = (%s >> 1) ^ -(%s & 1); pos += 1" % (dst, c, c))
        self.emit(ind, "else:")
        ind += 1
        self.emit(ind, "%s = %s & 127" % (u, c))
        for k in range(1, maxbytes):
            self.emit(ind, "%s = b[pos + %d]" % (c, k))
            self.emit(ind, "if %s < 128:" % c)
            self.emit(ind + 1, "%s |= %s << %d; %s = (%s >> 1) ^ -(%s & 1); pos += %d" % (u, c, 7 * k, dst, u, u, k + 1))
            self.emit(ind, "else:")
            ind += 1
            self.emit(ind, "%s |= (%s & 127) << %d" % (u, c, 7 * k))
        self.emit(ind, "raise Fallback")

    def node(self, ind, w, r, dst, packed=None):
        """Code that decodes writer node w (read as r) into variable dst; a bytes node with
        `packed` (a numpy dtype) becomes a read-only numpy view of b."""
        if isinstance(w, str) and w in self.named:
            w, r = self.named[w]
        if isinstance(w, list):
            if len(w) != 2 or w[0] != "null":
                raise ValueError("only [\"null\", T] unions")
            rr = r[1] if isinstance(r, list) else w[1]
            # the branch index is one byte, zigzag 0 or 1 (anything else: the checking decoder)
            br = self.var("br")
            self.emit(ind, "%s = b[pos]; pos += 1" % br)
            self.emit(ind, "if %s == 0:" % br)
            self.emit(ind + 1, "%s = None" % dst)
            self.emit(ind, "elif %s == 2:" % br)
            self.node(ind + 1, w[1], rr, dst, packed)
            self.emit(ind, "else:")
            self.emit(ind + 1, "raise Fallback")
            return
        t = w if isinstance(w, str) else w["type"]
        if t == "record":
            self.record(ind, w, r if isinstance(r, dict) and r.get("type") == "record" else w, dst)
        elif t == "array":
            ri = r["items"] if isinstance(r, dict) and r.get("type") == "array" else w["items"]
            n, item = self.var("n"), self.var("it")
            self.emit(ind, "%s = []" % dst)
            self.varint(ind, n)
            self.emit(ind, "while %s:" % n)
            self.emit(ind + 1, "if %s < 0:" % n)
            sz = self.var("sz")
            self.emit(ind + 2, "%s = -%s" % (n, n))
            self.varint(ind + 2, sz)
            self.emit(ind + 2, "if %s < 0 or %s > blen - pos:" % (sz, sz))
            self.emit(ind + 3, "raise Fallback")
            self.emit(ind + 1, "if %s > blen - pos:" % n)
            self.emit(ind + 2, "raise Fallback")
            self.emit(ind + 1, "for _ in range(%s):" % n)
            self.node(ind + 2, w["items"], ri, item)
            self.emit(ind + 2, "%s.append(%s)" % (dst, item))
            self.varint(ind + 1, n)
        elif t == "null":
            self.emit(ind, "%s = None" % dst)
        elif t == "boolean":
            c = self.var("c")
            self.emit(ind, "%s = b[pos]; pos += 1" % c)
            self.emit(ind, "if %s > 1:" % c)
            self.emit(ind + 1, "raise Fallback")
            self.emit(ind, "%s = %s == 1" % (dst, c))
        elif t in ("int", "long"):
            self.varint(ind, dst, 5 if t == "int" else 10)
            if t == "int":
                self.emit(ind, "if not -2147483648 <= %s <= 2147483647:" % dst)
                self.emit(ind + 1, "raise Fallback")
        elif t in ("float", "double"):
            # past the end, unpack_from raises struct.error (FALLBACK)
            size = 4 if t == "float" else 8
            self.emit(ind, "%s = %s(b, pos)[0]; pos += %d" % (dst, "uf" if t == "float" else "ud", size))
        elif t in ("bytes", "string"):
            n = self.var("n")
            self.varint(ind, n)
            self.emit(ind, "if %s < 0 or pos + %s > blen:" % (n, n))
            self.emit(ind + 1, "raise Fallback")
            if t == "string":
                self.emit(ind, "%s = b[pos:pos + %s].decode(); pos += %s" % (dst, n, n))
            elif packed is not None:
                self.emit(ind, "if %s %% %d:" % (n, packed.itemsize))  # the checking path names the fault
                self.emit(ind + 1, "raise Fallback")
                self.emit(ind, "%s = fb(b, %s, %s // %d, pos); pos += %s" % (dst, self.dtype(packed), n, packed.itemsize, n))
                if self.whole:  # every packed array of the record holds the same count
                    self.emit(ind, "if pc < 0:")
                    self.emit(ind + 1, "pc = %s // %d" % (n, packed.itemsize))
                    self.emit(ind, "elif %s // %d != pc:" % (n, packed.itemsize))
                    self.emit(ind + 1, "raise Fallback")
            else:
                self.emit(ind, "%s = mv[pos:pos + %s]; pos += %s" % (dst, n, n))
        else:
            raise ValueError("schema type %r" % (t,))

    def dtype(self, dt):
        name = "DT_" + dt.str.replace("<", "le").replace("|", "")
        self.consts[name] = dt
        return name

    def record(self, ind, w, r, dst):
        self.named[w["name"]] = (w, r)
        rnames = {f["name"]: f for f in r["fields"]}
        items = []  # the dict is built at the end, in one expression
        top = self.depth == 0
        self.depth += 1
        fields = w["fields"]
        i = 0
        while i < len(fields):
            # runs of fixed-size fields (float, double) and of ["null", float|double] unions
            # are read by one struct call each instead of one per field
            j = i
            while j < len(fields) and _fixed(fields[j]["type"]):
                j += 1
            if j - i < 2:
                j = i
                while j < len(fields) and _nullable_fixed(fields[j]["type"]):
                    j += 1
                if j - i < 2:
                    j = i
            if j > i:
                vs = [self.var("v") for _ in fields[i:j]]
                if _fixed(fields[i]["type"]):
                    self.fixed_run(ind, [_fixed(f["type"]) for f in fields[i:j]], vs)
                else:
                    self.nullable_run(ind, fields[i:j], vs)
                items += ["%r: %s" % (f["name"], v) for f, v in zip(fields[i:j], vs) if f["name"] in rnames]
                i = j
                continue
            f = fields[i]
            rf = rnames.get(f["name"])
            v = self.var("v")
            self.node(ind, f["type"], rf["type"] if rf is not None else f["type"], v,
                      self.packed.get(f["name"]) if top else None)
            if rf is not None:
                items.append("%r: %s" % (f["name"], v))
            i += 1
        self.depth -= 1
        wnames = {f["name"] for f in w["fields"]}
        for f in r["fields"]:
            if f["name"] not in wnames:
                d = f["default"]
                items.append("%r: %s" % (f["name"], "[]" if d == [] else repr(d)))
        if top and self.whole:
            self.tail(ind)
        self.emit(ind, "%s = {%s}" % (dst, ", ".join(items)))

    def struct(self, fmt):
        name = "S_" + fmt.replace("<", "")
        self.consts[name] = struct.Struct(fmt).unpack_from
        return name

    def fixed_run(self, ind, codes, vs):
        """Consecutive float/double fields: one unpack (past the end: struct.error, FALLBACK)."""
        fmt = "<" + "".join(codes)
        self.emit(ind, "%s, = %s(b, pos); pos += %d" % (", ".join(vs), self.struct(fmt), struct.calcsize(fmt)))

    def nullable_run(self, ind, fields, vs):
        """Consecutive ["null", float|double] unions: all present or all null is read at once
        (the branch bytes checked, the values in one unpack); any other mix field by field."""
        codes = [_nullable_fixed(f["type"]) for f in fields]
        fmt = "<" + "".join("x" + c for c in codes)
        size = struct.calcsize(fmt)
        offs, o = [], 0
        for c in codes:
            offs.append(o)
            o += 1 + struct.calcsize("<" + c)
        self.emit(ind, "if %s:" % " and ".join("b[pos + %d] == 2" % k for k in offs))
        self.emit(ind + 1, "%s, = %s(b, pos); pos += %d" % (", ".join(vs), self.struct(fmt), size))
        self.emit(ind, "elif %s:" % " and ".join("b[pos + %d] == 0" % k for k in range(len(codes))))
        self.emit(ind + 1, "%s = None; pos += %d" % (" = ".join(vs), len(codes)))
        self.emit(ind, "else:")
        for f, v in zip(fields, vs):
            self.node(ind + 1, f["type"], f["type"], v)

    def tail(self, ind):
        """whole: the record ends the input (the packed arrays' counts are checked where they are read)."""
        self.emit(ind, "if pos != blen:")
        self.emit(ind + 1, "raise Fallback")


def _fixed(t):
    t = t["type"] if isinstance(t, dict) else t
    return {"double": "d", "float": "f"}.get(t) if isinstance(t, str) else None


def _nullable_fixed(t):
    if isinstance(t, list) and len(t) == 2 and t[0] == "null":
        return _fixed(t[1])
    return None


def compile_decoder(writer, reader, packed=None, whole=False, native=None):
    """fn(b, mv, pos) -> (dict, pos) for records written with `writer` read as `reader`
    (parsed JSON schemas); raises _Fallback where the checking decoder must decide.

    packed maps top-level bytes fields to numpy dtypes: those fields come back as read-only
    numpy views of b (np.frombuffer) instead of memoryviews; a length that is not a multiple
    of the dtype's size falls back. With whole, the record must end the input and its packed
    fields that are present must hold the same number of entries (else: fallback).

    native: the compiled decoder (creditflow._native) where it can be had (None), never
    (False: the generated Python function), or always (True: ImportError without it). Both
    give the same values and fall back on the same bytes."""
    dtypes = {k: np.dtype(v) for k, v in (packed or {}).items()}
    if native is not False:
        from . import _native
        mod = _native.module()
        if mod is None and native:
            raise ImportError("creditflow: the compiled decoder is not available (creditflow._native)")
        if mod is not None:
            return functools.partial(mod.decode, (_native.program(writer, reader, dtypes), bool(whole)))
    g = _Gen({}, dtypes, whole)
    g.emit(1, "blen = len(b)")
    if whole:
        g.emit(1, "pc = -1")
    g.record(1, writer, reader, "out")
    g.emit(1, "return out, pos")
    src = "def decode(b, mv, pos):\n" + "\n".join(g.lines) + "\n"
    env = {"Fallback": _Fallback, "uf": struct.Struct("<f").unpack_from,
           "ud": struct.Struct("<d").unpack_from, "fb": np.frombuffer, **g.consts}
    exec(compile(src, "<avro decoder %s>" % writer["name"], "exec"), env)  # noqa: S102 (our own schema, our own code)
    return env["decode"]


FALLBACK = (_Fallback, IndexError, UnicodeDecodeError, struct.error)
