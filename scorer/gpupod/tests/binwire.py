"""The binary bodies of docs/scorer-protocol.md ("Binary bodies"), written from the
specification for the tests and independently of cfpod.binary: an encoder of rows requests
and a decoder of graphs answers.

Requests are described in plain Python, the same description giving both forms:
    set: {"id": str, "tokens": [ids], "target": [ids], "span": (a, b), "rows": [row]}
    row: {"context": [ids], "pieces": [(s, e) or [ids]], "target": [ids], "span": (a, b),
          "temperature": float}
every field optional except "rows"; a piece that is a tuple is a span, a list literal ids."""

import base64
import struct


def b64(ids):
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


def _ids(ids):
    return struct.pack(f"<I{len(ids)}i", len(ids), *ids)


def _piece(p):
    if isinstance(p, tuple):
        return struct.pack("<Bii", 0, p[0], p[1])
    return struct.pack("<B", 1) + _ids(p)


def _row(r):
    flags = sum(bit for bit, key in ((1, "context"), (2, "pieces"), (4, "target"), (8, "span"),
                                     (16, "temperature"), (32, "reference")) if key in r)
    out = struct.pack("<B", flags)
    if "context" in r:
        out += _ids(r["context"])
    if "pieces" in r:
        out += struct.pack("<I", len(r["pieces"])) + b"".join(_piece(p) for p in r["pieces"])
    if "target" in r:
        out += _ids(r["target"])
    if "span" in r:
        out += struct.pack("<ii", *r["span"])
    if "temperature" in r:
        out += struct.pack("<d", r["temperature"])
    if "reference" in r:
        out += _ids(r["reference"])
    return out


def _set(s):
    sid = s.get("id", "").encode("utf-8")
    flags = sum(bit for bit, key in ((1, "tokens"), (2, "target"), (4, "span"), (8, "statistic")) if key in s)
    out = struct.pack("<I", len(sid)) + sid + struct.pack("<B", flags)
    if "tokens" in s:
        out += _ids(s["tokens"])
    if "target" in s:
        out += _ids(s["target"])
    if "span" in s:
        out += struct.pack("<ii", *s["span"])
    if "statistic" in s:
        stat = s["statistic"].encode("utf-8")
        out += struct.pack("<I", len(stat)) + stat
    return out + struct.pack("<I", len(s["rows"])) + b"".join(_row(r) for r in s["rows"])


def encode_rows(sets):
    """The rows request body of the described sets."""
    return b"CFR1" + struct.pack("<I", len(sets)) + b"".join(_set(s) for s in sets)


def _json_value(key, v):
    if key in ("tokens", "target", "context", "reference"):
        return b64(v)
    if key == "span":
        return list(v)
    if key == "pieces":
        return [list(p) if isinstance(p, tuple) else b64(p) for p in v]
    return v


def json_rows(sets):
    """The JSON score request of the described sets."""
    out = []
    for s in sets:
        js = {k: _json_value(k, v) for k, v in s.items() if k != "rows"}
        js["rows"] = [{k: _json_value(k, v) for k, v in r.items()} for r in s["rows"]]
        out.append(js)
    return {"sets": out}


def _answer_head(body):
    """An attention answer's flags, policy version and job count, after its 4-byte magic:
    ({"policy_version"?}, the offset after them, the job count)."""
    off = 4
    flags, = struct.unpack_from("<B", body, off)
    off += 1
    assert flags & ~1 == 0, flags
    out = {}
    if flags & 1:
        out["policy_version"], = struct.unpack_from("<q", body, off)
        off += 8
    jobs, = struct.unpack_from("<I", body, off)
    return out, off + 4, jobs


def _decode_answer(body, magic, graph):
    """An attention answer of `magic`: its head, then per job the graphs graph(body, off)
    reads (each returning (graph, next offset)); asserts that every byte is used."""
    assert body[:4] == magic, body[:4]
    out, off, jobs = _answer_head(body)
    results = []
    for _ in range(jobs):
        n, = struct.unpack_from("<I", body, off)
        off += 4
        graphs = []
        for _ in range(n):
            g, off = graph(body, off)
            graphs.append(g)
        results.append(graphs)
    assert off == len(body), (off, len(body))
    out["results"] = results
    return out


def decode_graphs(body):
    """A graphs answer → {"results": [{"graphs": [{"layer", "aa", "ao"}]}]
    [, "policy_version"]}, the JSON answer's shape; asserts that every byte is used."""
    def graph(body, off):
        layer, k = struct.unpack_from("<iI", body, off)
        off += 8
        mats = []
        for _ in range(2):
            flat = struct.unpack_from(f"<{k * k}d", body, off)
            off += 8 * k * k
            mats.append([list(flat[j * k:(j + 1) * k]) for j in range(k)])
        return {"layer": layer, "aa": mats[0], "ao": mats[1]}, off
    out = _decode_answer(body, b"CFG1", graph)
    out["results"] = [{"graphs": gs} for gs in out["results"]]
    return out


def encode_jobs(jobs):
    """The jobs request body of jobs described as {"id"?, "tokens": [ids], "steps":
    [((a, b), (s, e) or None)], "layers": [ints] or None}."""
    out = b"CFJ1" + struct.pack("<I", len(jobs))
    for j in jobs:
        jid = j.get("id", "").encode("utf-8")
        out += struct.pack("<I", len(jid)) + jid + _ids(j["tokens"]) + struct.pack("<I", len(j["steps"]))
        for act, obs in j["steps"]:
            out += struct.pack("<ii", *act)
            out += struct.pack("<Bii", 1, *obs) if obs is not None else struct.pack("<B", 0)
        layers = j.get("layers")
        out += struct.pack("<B", 0) if layers is None else struct.pack(f"<BI{len(layers)}i", 1, len(layers), *layers)
    return out


def json_jobs(jobs):
    """The JSON attention request of the described jobs."""
    out = []
    for j in jobs:
        js = {"id": j["id"]} if j.get("id") else {}
        js["tokens"] = b64(j["tokens"])
        js["steps"] = [{"action": list(a), "observation": list(o) if o is not None else None} for a, o in j["steps"]]
        js["layers"] = j.get("layers")
        out.append(js)
    return {"jobs": out}


def decode_lower_graphs(body):
    """A lower-graphs answer → {"results": [[(layer, k, "sum" or "pair", [floats])]]
    [, "policy_version"]}; asserts that every byte is used."""
    def graph(body, off):
        layer, k, form = struct.unpack_from("<iIB", body, off)
        off += 9
        m = k * (k - 1) // 2 * (1 if form == 1 else 2)
        return (layer, k, {0: "pair", 1: "sum"}[form], list(struct.unpack_from(f"<{m}d", body, off))), off + 8 * m
    return _decode_answer(body, b"CFL1", graph)
