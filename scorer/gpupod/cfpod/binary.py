"""Binary bodies of the scorer protocol (features "binary", "binary_jobs" and "lower_graphs",
docs/scorer-protocol.md "Binary bodies", "Binary attention requests", "Lower graphs"): the
score request as application/vnd.creditflow.rows, the attention request as
application/vnd.creditflow.jobs, and the attention answer as application/vnd.creditflow.graphs
(K×K) or application/vnd.creditflow.lower-graphs (below the diagonal, summed where exact).

Guarantees:
- decode_rows turns a rows body into exactly the structure json.loads gives for the JSON
  form of the same request, except that token arrays are Tokens (a type JSON never
  produces); protocol.decode_tokens accepts them, so expansion, validation, limits and
  scoring are the JSON path's, unchanged;
- every malformed body (wrong magic, early end, trailing bytes, a count larger than the
  bytes that follow, an unknown flag bit or piece kind, an id that is not UTF-8) raises a
  400 bad_request Reject naming the offset; nothing is allocated from a count before it is
  checked against the bytes left;
- decode_jobs turns a jobs body into exactly the structure json.loads gives for the JSON
  form (an empty id absent, an empty observation and absent layers null), token arrays as
  Tokens, with the same 400s for malformed bodies;
- encode_graphs writes the float64 values of the JSON answer bit for bit, and
  policy_version exactly when the JSON answer carries it; encode_lower_graphs writes the
  entries below each diagonal, as their sums where the sum is exact by the rule of the Go
  code (internal/stepgraph), so that a record scored over either answer is the same bytes.
"""

import array
import math
import struct
import sys

from .protocol import Tokens, bad

MEDIA_ROWS = "application/vnd.creditflow.rows"
MEDIA_GRAPHS = "application/vnd.creditflow.graphs"
MEDIA_JOBS = "application/vnd.creditflow.jobs"
MEDIA_LOWER_GRAPHS = "application/vnd.creditflow.lower-graphs"

ROWS_MAGIC = b"CFR1"
GRAPHS_MAGIC = b"CFG1"
JOBS_MAGIC = b"CFJ1"
LOWER_MAGIC = b"CFL1"
JOB_LAYERS, STEP_OBSERVATION = 1, 1
LOWER_PAIR, LOWER_SUM = 0, 1

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

    def __init__(self, body, kind="score"):
        self.kind = kind  # "score" or "attention", for the messages
        self.buf = memoryview(body)
        self.end = len(self.buf)
        self.off = 0

    def left(self):
        return self.end - self.off

    def _early(self, n, what):
        return bad(f"binary {self.kind} request ends early: {what} needs {n} bytes at offset {self.off}, "
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
            raise bad(f"binary {self.kind} request: {what} count {n} at offset {at} is larger than the "
                      f"{self.left()} bytes that follow allow")
        return n

    def text(self, what, item):
        """A counted UTF-8 string (`what`: "set 3 id"); not UTF-8 is a Reject of item."""
        at = self.off
        raw = self.raw(self.count(f"{what} byte", 1), what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise bad(f"binary {self.kind} request: {what} at offset {at} is not UTF-8: {e}", item) from None

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
            raise bad(f"binary {self.kind} request: {what} flags {f:#04x} at offset {at} hold unknown bits "
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
    s = {"id": rd.text(f"{what} id", i)}
    f = rd.flags(SET_TOKENS | SET_TARGET | SET_SPAN | SET_STATISTIC, what)
    if f & SET_TOKENS:
        s["tokens"] = rd.ids(f"{what} tokens")
    if f & SET_TARGET:
        s["target"] = rd.ids(f"{what} target")
    if f & SET_SPAN:
        s["span"] = rd.span(f"{what} span")
    if f & SET_STATISTIC:
        s["statistic"] = rd.text(f"{what} statistic", i)
    n = rd.count(f"{what} row", _MIN_ROW)
    s["rows"] = [_row(rd, f"{what} row {j}") for j in range(n)]
    return s


def _decode_request(body, magic, kind, unit, min_size, read):
    """The units of a binary `kind` request body: its magic, a count, then each unit as
    read(reader, index) reads it, and nothing after. Raises a 400 Reject for any malformed
    body."""
    rd = _Reader(body, kind)
    got = bytes(rd.buf[:len(magic)])
    if got != magic:
        raise bad(f"binary {kind} request must start with {magic.decode()!r}, got {got!r}")
    rd.off = len(magic)
    n = rd.count(unit, min_size)
    units = [read(rd, i) for i in range(n)]
    if rd.left():
        raise bad(f"binary {kind} request holds {rd.left()} bytes after its last {unit} (offset {rd.off})")
    return units


def decode_rows(body):
    """A rows body → {"sets": [...]} in the shape of the JSON request (token arrays as
    Tokens). Raises a 400 Reject for any malformed body."""
    return {"sets": _decode_request(body, ROWS_MAGIC, "score", "set", _MIN_SET, _set)}


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


def _encode_answer(magic, resp, graph):
    """An attention answer body: magic, the policy version flag, then per job its graphs, each
    its layer and K and then graph(what, g, k), the bytes of its values."""
    out = [magic]
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
            out.append(graph(f"job {i} layer {g['layer']}", g, k))
    return b"".join(out)


def encode_graphs(resp):
    """The attention answer resp ({"results": [{"graphs": [{"layer", "aa", "ao"}]}],
    "policy_version"?}) as a graphs body."""
    return _encode_answer(GRAPHS_MAGIC, resp, lambda what, g, k: _matrix(g["aa"], k, f"{what} aa")
                          + _matrix(g["ao"], k, f"{what} ao"))


# ----- jobs request ----------------------------------------------------------------------

_MIN_JOB = 4 + 4 + 4 + 1  # id length, token count, step count, flags
_MIN_STEP = 8 + 1         # action span, flags


def _job(rd, i):
    what = f"job {i}"
    jid = rd.text(f"{what} id", i)
    j = {"id": jid} if jid else {}
    j["tokens"] = rd.ids(f"{what} tokens")
    steps = []
    for k in range(rd.count(f"{what} step", _MIN_STEP)):
        st = {"action": rd.span(f"{what} step {k} action"), "observation": None}
        if rd.flags(STEP_OBSERVATION, f"{what} step {k}") & STEP_OBSERVATION:
            st["observation"] = rd.span(f"{what} step {k} observation")
        steps.append(st)
    j["steps"] = steps
    j["layers"] = None
    if rd.flags(JOB_LAYERS, what) & JOB_LAYERS:
        n = rd.count(f"{what} layer", 4)
        j["layers"] = [rd.i32(f"{what} layer") for _ in range(n)]
    return j


def decode_jobs(body):
    """A jobs body → {"jobs": [...]} in the shape of the JSON request (token arrays as
    Tokens). Raises a 400 Reject for any malformed body."""
    return {"jobs": _decode_request(body, JOBS_MAGIC, "attention", "job", _MIN_JOB, _job)}


# ----- lower graphs answer ---------------------------------------------------------------


def _sum_exact(a, b):
    """Whether the entry pair (a, b) may be carried as its sum: both masses in [0, 1] and
    0.5·(a+b) equal to 0.5·a + 0.5·b in float64 (Go's stepgraph.SumExact)."""
    return 0 <= a <= 1 and 0 <= b <= 1 and 0.5 * (a + b) == 0.5 * a + 0.5 * b


def _lower(g, k, what):
    """The entries below the diagonal of a K×K graph: the sums, or the aa then ao values."""
    aa, ao = g["aa"], g["ao"]
    if len(aa) != k or len(ao) != k or any(len(r) != k for r in aa) or any(len(r) != k for r in ao):
        raise ValueError(f"{what} is not two {k}x{k} matrices")
    la = [v for j in range(1, k) for v in aa[j][:j]]
    lo = [v for j in range(1, k) for v in ao[j][:j]]
    if not all(map(math.isfinite, la)) or not all(map(math.isfinite, lo)):
        raise ValueError(f"{what} holds a value that is not finite")
    if k > 1 and all(map(_sum_exact, la, lo)):
        return LOWER_SUM, array.array("d", map(float.__add__, map(float, la), map(float, lo)))
    return LOWER_PAIR, array.array("d", la + lo)


def encode_lower_graphs(resp):
    """The attention answer resp (as for encode_graphs) as a lower-graphs body."""
    def graph(what, g, k):
        form, vals = _lower(g, k, what)
        if _BIG_ENDIAN:
            vals.byteswap()
        return _U8.pack(form) + vals.tobytes()
    return _encode_answer(LOWER_MAGIC, resp, graph)
