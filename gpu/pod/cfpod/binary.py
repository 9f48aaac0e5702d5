"""Binary bodies of the scorer protocol (feature "binary", docs/scorer-protocol.md "Binary
bodies"): the score request as application/vnd.creditflow.rows and the attention answer as
application/vnd.creditflow.graphs.

Guarantees:
- decode_rows turns a rows body into exactly the structure json.loads gives for the JSON
  form of the same request, except that token arrays are Tokens (a type JSON never
  produces); protocol.decode_tokens accepts them, so expansion, validation, limits and
  scoring are the JSON path's, unchanged;
- every malformed body (wrong magic, early end, trailing bytes, a count larger than the
  bytes that follow, an unknown flag bit or piece kind, an id that is not UTF-8) raises a
  400 bad_request Reject naming the offset; nothing is allocated from a count before it is
  checked against the bytes left;
- encode_graphs writes the float64 values of the JSON answer bit for bit, and
  policy_version exactly when the JSON answer carries it.
"""

import array
import math
import struct
import sys

from .protocol import Tokens, bad

MEDIA_ROWS = "application/vnd.creditflow.rows"
MEDIA_GRAPHS = "application/vnd.creditflow.graphs"

ROWS_MAGIC = b"CFR1"
GRAPHS_MAGIC = b"CFG1"

# Flag bits, in the order their fields follow.
SET_TOKENS, SET_TARGET, SET_SPAN, SET_STATISTIC = 1, 2, 4, 8
ROW_CONTEXT, ROW_PIECES, ROW_TARGET, ROW_SPAN, ROW_TEMPERATURE, ROW_REFERENCE = 1, 2, 4, 8, 16, 32
PIECE_SPAN, PIECE_LITERAL = 0, 1
GRAPHS_POLICY_VERSION = 1

# The fewest bytes an item can take: counts are checked against them before any loop.
_MIN_SET = 4 + 1 + 4     # id length, flags, row count
_MIN_ROW = 1             # flags
_MIN_PIECE = 1 + 4       # kind, then the smaller of a literal's count and a span's two i32

_U8, _U32, _I32, _I64, _F64 = (struct.Struct(f) for f in ("<B", "<I", "<i", "<q", "<d"))
_BIG_ENDIAN = sys.byteorder == "big"


def media_type(header):
    """The media type of a Content-Type value, lowercased, without parameters."""
    return (header or "").split(";", 1)[0].strip().lower()


def accepts(header, media):
    """Whether an Accept value lists media (parameters and case ignored; q=0 refuses it)."""
    for item in (header or "").split(","):
        parts = item.split(";")
        if parts[0].strip().lower() != media:
            continue
        q = [p.split("=", 1)[1].strip() for p in parts[1:] if p.strip().lower().startswith("q=")]
        try:
            if q and float(q[0]) <= 0:
                continue
        except ValueError:
            pass
        return True
    return False


# ----- rows request ----------------------------------------------------------------------


class _Reader:
    """A cursor over a body; every read checks that the bytes are there."""

    def __init__(self, body):
        self.buf = memoryview(body)
        self.end = len(self.buf)
        self.off = 0

    def left(self):
        return self.end - self.off

    def _early(self, n, what):
        return bad(f"binary score request ends early: {what} needs {n} bytes at offset {self.off}, "
                   f"{self.left()} left")

    def _unpack(self, st, what):
        off = self.off
        if off + st.size > self.end:
            raise self._early(st.size, what)
        self.off = off + st.size
        return st.unpack_from(self.buf, off)[0]

    def u8(self, what):
        return self._unpack(_U8, what)

    def u32(self, what):
        return self._unpack(_U32, what)

    def i32(self, what):
        return self._unpack(_I32, what)

    def f64(self, what):
        return self._unpack(_F64, what)

    def count(self, what, min_size):
        """A u32 count of items of at least min_size bytes each, checked against the rest."""
        at = self.off
        n = self.u32(f"{what} count")
        if n * min_size > self.left():
            raise bad(f"binary score request: {what} count {n} at offset {at} is larger than the "
                      f"{self.left()} bytes that follow allow")
        return n

    def raw(self, n, what):
        off = self.off
        if off + n > self.end:
            raise self._early(n, what)
        self.off = off + n
        return self.buf[off:off + n]

    def ids(self, what):
        """An id array: u32 n, then n little-endian int32."""
        n = self.count(what, 4)
        a = array.array("i")
        a.frombytes(self.raw(4 * n, what))
        if _BIG_ENDIAN:
            a.byteswap()
        return Tokens(a.tolist())

    def span(self, what):
        return [self.i32(what), self.i32(what)]

    def flags(self, known, what):
        at = self.off
        f = self.u8(f"{what} flags")
        if f & ~known:
            raise bad(f"binary score request: {what} flags {f:#04x} at offset {at} hold unknown bits "
                      f"{f & ~known:#04x}")
        return f


def _piece(rd, what):
    at = rd.off
    kind = rd.u8(f"{what} kind")
    if kind == PIECE_SPAN:
        return rd.span(what)
    if kind == PIECE_LITERAL:
        return rd.ids(what)
    raise bad(f"binary score request: {what} at offset {at} has kind {kind}; known kinds are "
              f"{PIECE_SPAN} (span) and {PIECE_LITERAL} (literal ids)")


def _row(rd, what):
    f = rd.flags(ROW_CONTEXT | ROW_PIECES | ROW_TARGET | ROW_SPAN | ROW_TEMPERATURE | ROW_REFERENCE, what)
    r = {}
    if f & ROW_CONTEXT:
        r["context"] = rd.ids(f"{what} context")
    if f & ROW_PIECES:
        n = rd.count(f"{what} piece", _MIN_PIECE)
        r["pieces"] = [_piece(rd, f"{what} piece {k}") for k in range(n)]
    if f & ROW_TARGET:
        r["target"] = rd.ids(f"{what} target")
    if f & ROW_SPAN:
        r["span"] = rd.span(f"{what} span")
    if f & ROW_TEMPERATURE:
        r["temperature"] = rd.f64(f"{what} temperature")
    if f & ROW_REFERENCE:
        r["reference"] = rd.ids(f"{what} reference")
    return r


def _set(rd, i):
    what = f"set {i}"
    at = rd.off
    raw = rd.raw(rd.count(f"{what} id byte", 1), f"{what} id")
    try:
        sid = str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise bad(f"binary score request: {what} id at offset {at} is not UTF-8: {e}", i) from None
    s = {"id": sid}
    f = rd.flags(SET_TOKENS | SET_TARGET | SET_SPAN | SET_STATISTIC, what)
    if f & SET_TOKENS:
        s["tokens"] = rd.ids(f"{what} tokens")
    if f & SET_TARGET:
        s["target"] = rd.ids(f"{what} target")
    if f & SET_SPAN:
        s["span"] = rd.span(f"{what} span")
    if f & SET_STATISTIC:
        at = rd.off
        raw = rd.raw(rd.count(f"{what} statistic byte", 1), f"{what} statistic")
        try:
            s["statistic"] = str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise bad(f"binary score request: {what} statistic at offset {at} is not UTF-8: {e}", i) from None
    n = rd.count(f"{what} row", _MIN_ROW)
    s["rows"] = [_row(rd, f"{what} row {j}") for j in range(n)]
    return s


def decode_rows(body):
    """A rows body → {"sets": [...]} in the shape of the JSON request (token arrays as
    Tokens). Raises a 400 Reject for any malformed body."""
    rd = _Reader(body)
    magic = bytes(rd.buf[:len(ROWS_MAGIC)])
    if magic != ROWS_MAGIC:
        raise bad(f"binary score request must start with {ROWS_MAGIC.decode()!r}, got {magic!r}")
    rd.off = len(ROWS_MAGIC)
    n = rd.count("set", _MIN_SET)
    sets = [_set(rd, i) for i in range(n)]
    if rd.left():
        raise bad(f"binary score request holds {rd.left()} bytes after its last set (offset {rd.off})")
    return {"sets": sets}


# ----- graphs answer ---------------------------------------------------------------------


def _matrix(m, k, what):
    """A K×K list of lists → K·K float64 little-endian, row-major; non-finite values fail as
    they do in the JSON answer (which cannot carry them)."""
    if len(m) != k or any(len(r) != k for r in m):
        raise ValueError(f"{what} is not {k}x{k}")
    a = array.array("d")
    for r in m:
        a.extend(r)
    if not all(map(math.isfinite, a)):
        raise ValueError(f"{what} holds a value that is not finite")
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def encode_graphs(resp):
    """The attention answer resp ({"results": [{"graphs": [{"layer", "aa", "ao"}]}],
    "policy_version"?}) as a graphs body."""
    out = [GRAPHS_MAGIC]
    pv = resp.get("policy_version")
    if pv is None:
        out.append(_U8.pack(0))
    else:
        out.append(_U8.pack(GRAPHS_POLICY_VERSION) + _I64.pack(pv))
    results = resp["results"]
    out.append(_U32.pack(len(results)))
    for i, res in enumerate(results):
        graphs = res["graphs"]
        out.append(_U32.pack(len(graphs)))
        for g in graphs:
            k = len(g["aa"])
            out.append(_I32.pack(g["layer"]) + _U32.pack(k))
            out.append(_matrix(g["aa"], k, f"job {i} layer {g['layer']} aa"))
            out.append(_matrix(g["ao"], k, f"job {i} layer {g['layer']} ao"))
    return b"".join(out)
