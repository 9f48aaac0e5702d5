"""Binary score requests (docs/scorer-protocol.md, "Binary bodies"): a rows body decodes to
the same validated model input as the JSON form of the request, and every malformed body is a
400 bad_request."""

import random
import struct
import unittest

from cfpod.binary import MEDIA_GRAPHS, accepts, decode_rows, encode_graphs, media_type
from cfpod.protocol import FEATURES, Reject, Tokens, decode_tokens, parse_score_request
from tests.binwire import decode_graphs, encode_rows, json_rows
from tests.util import cpu_only

INFO = {"vocab_size": 260, "max_context": 4096, "layers": 2}
TOKENS = [1, 2, 3, 4, 5, 6]
TARGET = [7, 8, 9]

# Full rows, compact rows (span and literal pieces, set-level target and span, a row's own
# span into the set's target, a row with its own target), temperature present and absent,
# an empty id and a non-ASCII one.
SETS = [
    {"id": "full", "rows": [
        {"context": [1, 2, 3], "target": TARGET, "span": (0, 3), "temperature": 0.7},
        {"context": [4, 5], "target": [9, 8], "span": (1, 2)}]},
    {"id": "trajectoire-é", "tokens": TOKENS, "target": TARGET, "span": (1, 2), "rows": [
        {"pieces": [(0, 6)], "temperature": 0.7},
        {"pieces": [(0, 2), [259], (4, 6)], "temperature": 1.3},
        {"pieces": [(0, 4), [259]]},
        {"pieces": [(3, 3), (0, 1), (0, 1)], "span": (0, 3)},
        {"pieces": [], "span": (1, 3)},
        {"context": [1], "target": [9, 9], "span": (0, 1), "temperature": 2.0},
        {"pieces": [(0, 2)], "target": [5, 6], "span": (0, 2)}]},
    {"rows": [{"context": [3], "target": [4], "span": (0, 1)}]},
]


@cpu_only
class BinaryRows(unittest.TestCase):
    def test_advertised(self):
        self.assertEqual(FEATURES[:3], ("row_pieces", "binary", "statistics"))

    def test_binary_decodes_to_the_json_requests_model_input(self):
        want = parse_score_request(json_rows(SETS), INFO)
        got = parse_score_request(decode_rows(encode_rows(SETS)), INFO)
        self.assertEqual(got, want)
        # The expanded rows are the ones of the specification, not only equal to each other.
        self.assertEqual(got[1][1][1], ([1, 2, 259, 5, 6], TARGET, (1, 2), 1.3))
        self.assertEqual(got[1][1][3], ([1, 1], TARGET, (0, 3), 1.0))
        self.assertEqual([s for s, _ in got], ["full", "trajectoire-é", ""])

    def test_each_set_alone(self):
        for s in SETS:
            with self.subTest(id=s.get("id")):
                self.assertEqual(parse_score_request(decode_rows(encode_rows([s])), INFO),
                                 parse_score_request(json_rows([s]), INFO))

    def test_limits_count_the_decoded_tokens(self):
        seen = []
        parse_score_request(decode_rows(encode_rows(SETS)), INFO, lambda r, t: seen.append((r, t)))
        rows = [r for s in SETS for r in s["rows"]]
        want = 0
        for s in SETS:
            for r in s["rows"]:
                want += len(r.get("context", [])) + len(r.get("target", s.get("target", [])))
                want += sum(p[1] - p[0] if isinstance(p, tuple) else len(p) for p in r.get("pieces", []))
        self.assertEqual(seen, [(len(rows), want)])

    def test_validation_is_the_json_paths(self):
        """Invalid rows give the JSON form's 400, item and id included."""
        for row, msg in [({"pieces": [(0, 7)]}, "piece 0: span [0, 7)"),
                         ({"pieces": [[999]]}, "outside the vocabulary"),
                         ({"pieces": [(0, 1)], "context": [1]}, "both"),
                         ({"pieces": [(0, 1)], "temperature": float("nan")}, "temperature"),
                         ({"pieces": [(0, 1)], "temperature": -1.0}, "temperature"),
                         ({"pieces": [(0, 1)], "span": (2, 4)}, "span [2, 4)")]:
            sets = [SETS[0], dict(SETS[1], rows=[row])]
            with self.subTest(row=row):
                with self.assertRaises(Reject) as jc:
                    parse_score_request(json_rows(sets), INFO)
                with self.assertRaises(Reject) as bc:
                    parse_score_request(decode_rows(encode_rows(sets)), INFO)
                j, b = jc.exception, bc.exception
                self.assertEqual((b.status, b.code, b.message, b.item, b.id),
                                 (j.status, j.code, j.message, j.item, j.id))
                self.assertIn(msg, b.message)

    def test_json_token_arrays_stay_strings(self):
        self.assertEqual(decode_tokens(Tokens([1, 2]), "x"), [1, 2])
        for v in ([1, 2], 5, {"ids": [1]}):
            with self.assertRaises(Reject):
                decode_tokens(v, "x")
        req = {"sets": [{"rows": [{"context": [1, 2], "target": "AwAAAA==", "span": [0, 1]}]}]}
        with self.assertRaises(Reject) as cm:
            parse_score_request(req, INFO)
        self.assertIn("base64 string", cm.exception.message)


def malformed_bodies():
    """(name, body) pairs that are all 400s: every truncation of a valid body, then the
    other ways a body can be wrong."""
    good = encode_rows(SETS)
    out = [(f"truncated at {n}", good[:n]) for n in range(len(good))]
    one = encode_rows([{"id": "x", "rows": [{"context": [1], "target": [2], "span": (0, 1)}]}])
    # one: "CFR1" u32 1 | u32 1 "x" u8 0 | u32 1 | u8 flags(13) ...
    row_flags_at = 4 + 4 + 4 + 1 + 1 + 4
    assert one[row_flags_at] == 1 | 4 | 8
    out += [
        ("trailing byte", good + b"\0"),
        ("bad magic", b"CFR2" + good[4:]),
        ("json body", b'{"sets": []}'),
        ("unknown set flag", one[:13] + bytes([16]) + one[14:]),
        ("unknown row flag", one[:row_flags_at] + bytes([one[row_flags_at] | 64]) + one[row_flags_at + 1:]),
        ("huge set count", b"CFR1" + struct.pack("<I", 0xFFFFFFFF) + one[8:]),
        ("huge id length", b"CFR1" + struct.pack("<II", 1, 0xFFFFFFFF) + one[12:]),
        ("huge id count", one[:row_flags_at + 1] + struct.pack("<I", 0x40000000) + one[row_flags_at + 5:]),
        ("huge row count", one[:14] + struct.pack("<I", 0xFFFFFFFF) + one[18:]),
        ("huge piece count", encode_rows([{"id": "", "rows": [{"pieces": []}]}])[:18]
         + struct.pack("<I", 1 << 31) + b"\0" * 16),
        ("piece kind 2", encode_rows([{"id": "", "rows": [{"pieces": []}]}])[:18]
         + struct.pack("<IBii", 1, 2, 0, 1)),
        ("id not UTF-8", b"CFR1" + struct.pack("<II", 1, 1) + b"\xff" + one[13:]),
    ]
    return out


@cpu_only
class MalformedRows(unittest.TestCase):
    def test_every_malformed_body_is_a_400(self):
        for name, body in malformed_bodies():
            with self.subTest(name=name):
                with self.assertRaises(Reject) as cm:
                    decode_rows(body)
                self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_request"))
                self.assertTrue(cm.exception.message.startswith("binary score request"), cm.exception.message)

    def test_messages_name_the_fault(self):
        bodies = dict(malformed_bodies())
        for name, want in [("trailing byte", "after its last set"), ("bad magic", "must start with 'CFR1'"),
                           ("unknown row flag", "unknown bits 0x40"), ("huge set count", "count 4294967295"),
                           ("piece kind 2", "kind 2"), ("id not UTF-8", "not UTF-8"),
                           (f"truncated at {len(encode_rows(SETS)) - 1}", "ends early"),
                           ("truncated at 9", "set count 3 at offset 4 is larger than the 1 bytes")]:
            with self.subTest(name=name):
                with self.assertRaises(Reject) as cm:
                    decode_rows(bodies[name])
                self.assertIn(want, cm.exception.message)

    def test_random_corruption_is_a_400_or_valid(self):
        """Flipped bytes never escape as anything but a Reject, through decoding and validation."""
        rng = random.Random(7)
        good = encode_rows(SETS)
        for _ in range(3000):
            body = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            try:
                parse_score_request(decode_rows(bytes(body)), INFO)
            except Reject as e:
                self.assertEqual((e.status, e.code), (400, "bad_request"))

    def test_empty_request(self):
        self.assertEqual(decode_rows(b"CFR1\0\0\0\0"), {"sets": []})


@cpu_only
class Graphs(unittest.TestCase):
    RESP = {"results": [{"graphs": [{"layer": 2, "aa": [[0.0, 0.0], [0.1 + 0.2, 0.0]],
                                     "ao": [[0.0, 0.0], [1e-300, 0.0]]},
                                    {"layer": 0, "aa": [[0.0]], "ao": [[5e-324]]}]},
                        {"graphs": []}],
            "policy_version": -(1 << 40)}

    def test_encode_round_trips_exactly(self):
        self.assertEqual(decode_graphs(encode_graphs(self.RESP)), self.RESP)
        no_pv = {"results": self.RESP["results"]}
        self.assertEqual(decode_graphs(encode_graphs(no_pv)), no_pv)

    def test_non_finite_values_fail_as_in_json(self):
        resp = {"results": [{"graphs": [{"layer": 0, "aa": [[float("nan")]], "ao": [[0.0]]}]}]}
        with self.assertRaises(ValueError):
            encode_graphs(resp)

    def test_media_types(self):
        for h, want in [(MEDIA_GRAPHS, True), ("Application/VND.creditflow.graphs", True),
                        ("application/json, application/vnd.creditflow.graphs;q=0.9", True),
                        ("application/json , application/vnd.creditflow.graphs ; v=1", True),
                        ("application/vnd.creditflow.graphs;q=0", False),
                        ("application/json", False), ("*/*", False), ("", False), (None, False),
                        ("application/vnd.creditflow.graphsx", False)]:
            with self.subTest(h=h):
                self.assertEqual(accepts(h, MEDIA_GRAPHS), want)
        self.assertEqual(media_type("Application/Vnd.Creditflow.Rows; charset=binary"),
                         "application/vnd.creditflow.rows")


if __name__ == "__main__":
    unittest.main()
