"""Compact score rows (docs/scorer-protocol.md, "Compact rows"): parse_score_request expands
pieces into the same rows as full contexts, and rejects invalid pieces with a 400."""

import unittest

from cfpod.protocol import FEATURES, Reject, parse_score_request
from tests.util import cpu_only
import base64
import struct

INFO = {"vocab_size": 260, "max_context": 4096, "layers": 2}


def enc(ids):
    return base64.b64encode(struct.pack("<%di" % len(ids), *ids)).decode()


TOKENS = [1, 2, 3, 4, 5, 6]
TARGET = [7, 8, 9]


def full_request():
    rows = [[1, 2, 3, 4, 5, 6], [1, 2, 259, 5, 6], [1, 2, 3, 4, 259], [1, 2, 3]]
    return {"sets": [{"id": "t", "rows": [{"context": enc(c), "target": enc(TARGET), "span": [1, 2],
                                            "temperature": 0.7} for c in rows]}]}


def compact_request(rows=None):
    rows = rows if rows is not None else [
        {"pieces": [[0, 6]]},
        {"pieces": [[0, 2], enc([259]), [4, 6]]},
        {"pieces": [[0, 4], enc([259])]},
        {"pieces": [[0, 3]]},
    ]
    for r in rows:
        r.setdefault("temperature", 0.7)
    return {"sets": [{"id": "t", "tokens": enc(TOKENS), "target": enc(TARGET), "span": [1, 2], "rows": rows}]}


@cpu_only
class CompactRows(unittest.TestCase):
    def test_advertised(self):
        self.assertIn("row_pieces", FEATURES)

    def test_compact_expands_to_full(self):
        self.assertEqual(parse_score_request(compact_request(), INFO), parse_score_request(full_request(), INFO))

    def test_row_target_overrides_set_target(self):
        req = compact_request([{"pieces": [[0, 2]], "target": enc([9, 9]), "span": [0, 1]}])
        (_, rows), = parse_score_request(req, INFO)
        self.assertEqual(rows[0][:3], ([1, 2], [9, 9], (0, 1)))

    def test_invalid_pieces(self):
        for row, want in [({"pieces": [[0, 7]]}, "piece 0: span [0, 7)"),
                          ({"pieces": [[-1, 2]]}, "piece 0: span [-1, 2)"),
                          ({"pieces": [[3, 2]]}, "piece 0: span [3, 2)"),
                          ({"pieces": [[0, 1], [1, 9]]}, "piece 1"),
                          ({"pieces": [[0, 1]], "context": enc([1])}, "both"),
                          ({"pieces": [[0, 1, 2]]}, "piece 0"),
                          ({"pieces": [1]}, "piece 0"),
                          ({"pieces": "x"}, "pieces must be a list"),
                          ({"pieces": ["AQA"]}, "base64"),
                          ({"pieces": [enc([999])]}, "outside the vocabulary")]:
            with self.subTest(row=row):
                with self.assertRaises(Reject) as cm:
                    parse_score_request(compact_request([row]), INFO)
                self.assertEqual(cm.exception.status, 400)
                self.assertIn(want, cm.exception.message)

    def test_span_piece_without_set_tokens(self):
        req = {"sets": [{"rows": [{"pieces": [[0, 1]], "target": enc([3]), "span": [0, 1]}]}]}
        with self.assertRaises(Reject) as cm:
            parse_score_request(req, INFO)
        self.assertIn("set's 0 tokens", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
