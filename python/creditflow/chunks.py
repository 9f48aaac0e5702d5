"""Records larger than one Kafka message (docs/wire-format.md, "Records larger than one
message"): creditflow writes such a record as chunk messages with the record's key, each with
a slice of the value and the headers creditflow-chunk (b"<index>/<count>"),
creditflow-chunk-of (hex SHA-256 of the whole value) and creditflow-chunk-bytes (its length).
Reassembler puts them back together; split cuts a value. SampleStream uses Reassembler.
(examples/python/creditflow_chunks.py uses it in a plain confluent-kafka reader and writer.)
"""

import hashlib

CHUNK = "creditflow-chunk"
CHUNK_OF = "creditflow-chunk-of"
CHUNK_BYTES = "creditflow-chunk-bytes"
DEFAULT_CHUNK_BYTES = 768 << 10


def split(key: bytes, value: bytes, headers=(), chunk_bytes: int = DEFAULT_CHUNK_BYTES):
    """Returns [(key, value, headers), ...]: the chunk messages of one record.
    Produce them in order, in one partition (same key), with acks=all; when
    any fails, produce all of them again."""
    n = max(1, -(-len(value) // chunk_bytes))
    of = hashlib.sha256(value).hexdigest().encode()
    size = str(len(value)).encode()
    out = []
    for i in range(n):
        hs = list(headers) + [(CHUNK, b"%d/%d" % (i, n)), (CHUNK_OF, of), (CHUNK_BYTES, size)]
        out.append((key, value[i * chunk_bytes:(i + 1) * chunk_bytes], hs))
    return out


def _header(headers, name):
    for k, v in headers or ():
        if k == name:
            return v if isinstance(v, bytes) else (v or b"").encode()
    return None


class Reassembler:
    """Puts chunked records of one or more partitions back together.

    add(partition, offset, key, value, headers) returns (record, broken):
    record is None or a dict with key, value, headers (chunk headers removed)
    and offset (the last chunk's); broken is a list of dicts (reason, detail,
    offset of the first chunk, key, the bytes received) for chunk sequences
    that cannot complete. commit_offset(partition, next) is the offset to
    commit instead of next: never past the first chunk of a record still
    being put together, so a restarted consumer sees all of its chunks.

    Same rules as the Go consumers.Assembler: chunks of a record come in
    order 0..n-1 (other records may interleave); a chunk 0 of a record in
    progress restarts it; a gap or a SHA-256 mismatch breaks it; a chunk
    with index > 0 of no record in progress is skipped (stray: the tail of a
    record read before this consumer's start offset, or of a partial write
    the producer rewrote whole).
    """

    def __init__(self, max_record_bytes: int = 64 << 20):
        self.max_record_bytes = max_record_bytes
        self.open = {}  # (partition, sha) -> state
        self.stray = 0

    def add(self, partition, offset, key, value, headers):
        pos = _header(headers, CHUNK)
        if pos is None:
            return {"key": key, "value": value, "headers": list(headers or ()), "offset": offset, "first": offset}, []
        try:
            index, count = (int(x) for x in pos.split(b"/"))
            of = _header(headers, CHUNK_OF).decode()
            size = int(_header(headers, CHUNK_BYTES))
            if not (0 <= index < count) or len(of) != 64 or size < count:
                raise ValueError(pos)
        except (TypeError, ValueError, AttributeError) as e:
            return None, [{"reason": "chunk_corrupt", "detail": "bad chunk headers: %s" % e, "offset": offset,
                           "key": key, "value": value}]
        plain = [(k, v) for k, v in headers if k not in (CHUNK, CHUNK_OF, CHUNK_BYTES)]
        if size > self.max_record_bytes:
            if index == 0:
                return None, [{"reason": "too_large", "detail": "%d bytes" % size, "offset": offset,
                               "key": key, "value": value}]
            self.stray += 1
            return None, []
        slot = (partition, of)
        st = self.open.get(slot)
        if index == 0:
            st = {"first": offset, "next": 0, "count": count, "size": size, "parts": [], "key": key, "headers": plain}
            self.open[slot] = st
        elif st is None:
            self.stray += 1
            return None, []
        if index < st["next"]:
            return None, []  # a copy of a chunk already held
        if index > st["next"] or count != st["count"] or size != st["size"]:
            del self.open[slot]
            return None, [{"reason": "chunk_incomplete", "detail": "chunk %d/%d follows %d" % (index, count, st["next"] - 1),
                           "offset": st["first"], "key": st["key"], "value": b"".join(st["parts"])}]
        st["parts"].append(value)
        st["next"] += 1
        if st["next"] < count:
            return None, []
        del self.open[slot]
        whole = b"".join(st["parts"])
        if len(whole) != size or hashlib.sha256(whole).hexdigest() != of:
            return None, [{"reason": "chunk_corrupt", "detail": "SHA-256 or length mismatch", "offset": st["first"],
                           "key": st["key"], "value": whole}]
        return {"key": st["key"], "value": whole, "headers": st["headers"], "offset": offset, "first": st["first"]}, []

    def forget(self, partition):
        """Drops what is buffered for a partition (it was revoked)."""
        for slot in [s for s in self.open if s[0] == partition]:
            del self.open[slot]

    def commit_offset(self, partition, next_offset):
        firsts = [st["first"] for (p, _), st in self.open.items() if p == partition]
        return min([next_offset] + firsts)
