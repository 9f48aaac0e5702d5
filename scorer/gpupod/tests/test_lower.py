"""Binary attention requests and the lower-graphs answer (docs/scorer-protocol.md, "Binary
attention requests", "Lower graphs"): a jobs body decodes to the JSON request's validated
model input, and the lower answer holds each graph's entries below the diagonal, as sums
exactly where the sum is exact."""

import json
import unittest

from cfpod.binary import decode_jobs, encode_lower_graphs
from cfpod.protocol import FEATURES, Reject, decode_tokens, parse_attention_request
from tests.binwire import decode_lower_graphs, encode_jobs, json_jobs
from tests.util import cpu_only

INFO = {"vocab_size": 260, "max_context": 4096, "layers": 4}

JOBS = [
    {"id": "traj-é", "tokens": [1, 2, 3, 4, 5, 6, 7, 8], "steps": [((0, 2), (2, 4)), ((4, 6), None), ((6, 8), None)],
     "layers": [0, 2]},
    {"tokens": [9, 8, 7], "steps": [((0, 3), None)], "layers": None},
    {"id": "empty-layers", "tokens": [1, 1], "steps": [((0, 1), (1, 2))], "layers": []},
]


@cpu_only
class BinaryJobs(unittest.TestCase):
    def test_advertised(self):
        self.assertIn("binary_jobs", FEATURES)
        self.assertIn("lower_graphs", FEATURES)

    def test_decodes_to_the_json_structure(self):
        want = json.loads(json.dumps(json_jobs(JOBS)))
        got = decode_jobs(encode_jobs(JOBS))
        for w, g in zip(want["jobs"], got["jobs"]):
            w["tokens"] = decode_tokens(w["tokens"], "json")
            g["tokens"] = decode_tokens(g["tokens"], "binary")
        self.assertEqual(got, want)
        self.assertNotIn("id", got["jobs"][1])
        self.assertIsNone(got["jobs"][1]["layers"])
        self.assertEqual(got["jobs"][2]["layers"], [])

    def test_decodes_to_the_json_requests_model_input(self):
        jobs = [dict(j, layers=j["layers"] or [1]) for j in JOBS]
        want = parse_attention_request(json.loads(json.dumps(json_jobs(jobs))), INFO)
        got = parse_attention_request(decode_jobs(encode_jobs(jobs)), INFO)
        self.assertEqual(got, want)
        self.assertEqual(got[0][0], "traj-é")
        self.assertEqual(got[0][1], [1, 2, 3, 4, 5, 6, 7, 8])

    def test_malformed_bodies_are_400(self):
        body = encode_jobs(JOBS)
        for cut in range(len(body)):
            with self.subTest(cut=cut), self.assertRaises(Reject) as cm:
                decode_jobs(body[:cut])
            self.assertEqual(cm.exception.status, 400)
        for bad_body in (body + b"\0", b"CFR1" + body[4:], body[:8] + b"\xff" + body[9:]):
            with self.assertRaises(Reject):
                decode_jobs(bad_body)
        self.assertIn("attention request", str(self._reject(body[:-1]).message))

    def _reject(self, body):
        try:
            decode_jobs(body)
        except Reject as r:
            return r
        self.fail("decoded")


@cpu_only
class LowerGraphs(unittest.TestCase):
    # Layer 2: sums exact. Layer 5: an entry whose halving underflows keeps the pair. Layer 7:
    # a mass above 1 keeps the pair. Layer 0: K = 1, no entries.
    RESP = {"results": [{"graphs": [
        {"layer": 2, "aa": [[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.2, 0.3, 0.0]],
         "ao": [[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.05, 0.15, 0.0]]},
        {"layer": 5, "aa": [[0.0, 0.0], [5e-324, 0.0]], "ao": [[0.0, 0.0], [5e-324, 0.0]]},
        {"layer": 7, "aa": [[0.0, 0.0], [1.5, 0.0]], "ao": [[0.0, 0.0], [0.25, 0.0]]},
        {"layer": 0, "aa": [[0.0]], "ao": [[0.0]]}]},
        {"graphs": []}], "policy_version": 9}

    def test_forms_and_values(self):
        got = decode_lower_graphs(encode_lower_graphs(self.RESP))
        self.assertEqual(got["policy_version"], 9)
        g = got["results"][0]
        self.assertEqual(g[0], (2, 3, "sum", [0.1 + 0.2, 0.2 + 0.05, 0.3 + 0.15]))
        self.assertEqual(g[1], (5, 2, "pair", [5e-324, 5e-324]))
        self.assertEqual(g[2], (7, 2, "pair", [1.5, 0.25]))
        self.assertEqual(g[3], (0, 1, "pair", []))
        self.assertEqual(got["results"][1], [])
        no_pv = decode_lower_graphs(encode_lower_graphs({"results": []}))
        self.assertEqual(no_pv, {"results": []})

    def test_other_shapes_and_non_finite_values_fail(self):
        for g in ({"layer": 0, "aa": [[0.0, 0.0], [float("nan"), 0.0]], "ao": [[0.0, 0.0], [0.0, 0.0]]},
                  {"layer": 0, "aa": [[0.0, 0.0], [0.1]], "ao": [[0.0, 0.0], [0.0, 0.0]]}):
            with self.assertRaises(ValueError):
                encode_lower_graphs({"results": [{"graphs": [g]}]})


if __name__ == "__main__":
    unittest.main()
