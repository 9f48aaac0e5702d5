import base64
import http.client
import io
import json
import os
import shutil
import struct
import tempfile
import threading
import time
import unittest

import torch

from cfpod.model import Model
from cfpod.protocol import parse_score_request
from cfpod.server import PROTOCOL_HEADER, PROTOCOL_VERSION, Exchange, Logger, Pod, make_server
from tests.binwire import decode_graphs, encode_rows, json_rows
from tests.test_binary import malformed_bodies
from tests.util import DEVICE, ON_CPU, TOL, small_config, write_checkpoint

TOKEN = "s3cret"


def b64(ids):
    return base64.b64encode(struct.pack(f"<{len(ids)}i", *ids)).decode()


class ServerTest(unittest.TestCase):
    def assertClose(self, got, want):
        """Equal on CPU (same arithmetic); within TOL on accelerators, whose kernels may
        not be bitwise deterministic."""
        if ON_CPU:
            self.assertEqual(got, want)
            return
        flat = lambda x: [v for r in x for v in (r if isinstance(r, list) else [r])]  # noqa: E731
        for a, b in zip(flat(got), flat(want)):
            self.assertAlmostEqual(a, b, delta=TOL)

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.folder = os.path.join(cls.dir, "m1")
        write_checkpoint(cls.folder, small_config(), seed=1, placeholder=96)
        cls.log = io.StringIO()
        cls.pod = Pod(cls.folder, device=DEVICE, token=TOKEN, admin_token="admin", policy_version=4,
                      max_rows=50, max_tokens=20000, max_request_bytes=200000, max_concurrent=2,
                      log=Logger("info", cls.log))
        cls.srv = make_server(cls.pod, "127.0.0.1", 0)
        cls.port = cls.srv.server_address[1]
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()
        cls.srv.server_close()
        shutil.rmtree(cls.dir)

    def call(self, method, path, body=None, token=TOKEN, header=True, raw=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        if header:
            h[PROTOCOL_HEADER] = PROTOCOL_VERSION
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        c.close()
        ctype = r.getheader("Content-Type") or ""
        return r.status, (json.loads(out) if ctype.startswith("application/json") else out.decode()), r

    def score_body(self, rows_per_set):
        return {"sets": [{"id": f"s{i}", "rows": [{"context": b64(c), "target": b64(t), "span": list(s)}
                                                   for c, t, s in rows]} for i, rows in enumerate(rows_per_set)]}

    def test_health_info_and_metrics(self):
        st, body, _ = self.call("GET", "/healthz", token=None, header=False)
        self.assertEqual((st, body["status"], body["protocol"]), (200, "ok", PROTOCOL_VERSION))
        st, info, r = self.call("GET", "/v1/info", header=False)
        self.assertEqual(st, 200)
        self.assertEqual(r.getheader(PROTOCOL_HEADER), PROTOCOL_VERSION)
        self.assertEqual((info["architecture"], info["layers"], info["vocab_size"], info["max_context"],
                          info["placeholder_ids"], info["protocol"]),
                         ("LlamaForCausalLM", 3, 97, 2048, [96], PROTOCOL_VERSION))
        self.assertGreaterEqual(info["policy_version"], 4)
        # A request is counted after its answer is written, so the counter can trail the
        # answer by a moment: read /metrics until it shows the info request (at most 5 s).
        deadline = time.monotonic() + 5
        while True:
            st, text, _ = self.call("GET", "/metrics", token=None, header=False)
            self.assertEqual(st, 200)
            if 'creditflow_scorer_server_requests_total{op="info",status="200"}' in text or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertIn("# TYPE creditflow_scorer_server_requests_total counter", text)
        self.assertIn('creditflow_scorer_server_requests_total{op="info",status="200"}', text)
        self.assertIn("creditflow_scorer_pod_policy_version", text)

    def test_score_matches_the_model_and_reports_usage(self):
        rows = [[([1, 2, 3, 4, 5], [6, 7, 8], (0, 3)), ([1, 2, 3, 96, 5], [6, 7, 8], (1, 3))],
                [([9, 9], [1, 2], (0, 2))]]
        before = self.pod.m_forwarded.value()
        m = self.pod.current.model
        packing, m.packing = m.packing, "walk"
        self.addCleanup(setattr, m, "packing", packing)
        st, body, _ = self.call("POST", "/v1/score", self.score_body(rows))
        self.assertEqual(st, 200, body)
        want, u = m.score_rows([r for rs in rows for r in rs])
        got = body["results"][0]["scores"] + body["results"][1]["scores"]
        self.assertClose(got, want)
        self.assertEqual([r["truncations"] for r in body["results"]], [0, 0])
        self.assertEqual(body["usage"], {"tokens_forwarded": u.tokens_forwarded,
                                         "tokens_row_by_row": 8 + 8 + 4, "truncations": 0,
                                         "packs": 0, "max_pack_tokens": 0})  # the walk makes no packs
        self.assertEqual(u.tokens_forwarded, 3 + 5 + 5 + 4)
        self.assertEqual(self.pod.m_forwarded.value() - before, u.tokens_forwarded)
        # Tree packing: both sets in one pack of every distinct token.
        m.packing = "tree"
        st, body, _ = self.call("POST", "/v1/score", self.score_body(rows))
        self.assertEqual(st, 200, body)
        self.assertEqual(body["usage"], {"tokens_forwarded": 17, "tokens_row_by_row": 20, "truncations": 0,
                                         "packs": 1, "max_pack_tokens": 17})

    def test_out_of_memory_is_413_naming_what_fit(self):
        # An allocation failure inside model work (injected: a CPU run cannot exhaust an
        # accelerator) is a 413 out_of_memory that names the largest request that fit, is
        # counted, and leaves the pod serving.
        rows = [[([1, 2, 3, 4, 5], [6, 7, 8], (0, 3))]]
        st, body, _ = self.call("POST", "/v1/score", self.score_body(rows))
        self.assertEqual(st, 200, body)
        fit = self.pod.fit_tokens["score"]
        self.assertGreaterEqual(fit, 8)
        m = self.pod.current.model
        big = [[([1, 2, 3, 4, 5] * 40, [6, 7, 8], (0, 3))] * 3]

        def oom(planned):
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 139.80 GiB total capacity)")
        m.score_plan = oom
        try:
            st, body, _ = self.call("POST", "/v1/score", self.score_body(big))
        finally:
            del m.score_plan
        self.assertEqual((st, body["code"]), (413, "out_of_memory"), body)
        self.assertIn(f"request of {3 * 203} tokens", body["error"])
        self.assertIn(f"requests of up to {fit} tokens have fit", body["error"])
        self.assertEqual(self.pod.m_oom.value("score"), 1)
        st, body, _ = self.call("POST", "/v1/score", self.score_body(rows))
        self.assertEqual(st, 200, body)
        # Any other failure stays a 500.
        m.score_plan = lambda planned: 1 / 0
        try:
            st, body, _ = self.call("POST", "/v1/score", self.score_body(rows))
        finally:
            del m.score_plan
        self.assertEqual((st, body["code"]), (500, "internal"), body)

    def test_score_uses_each_rows_temperature(self):
        row = ([1, 2, 3, 4, 5], [6, 7, 8], (0, 3))
        body = self.score_body([[row, row], [row]])
        body["sets"][0]["rows"][1]["temperature"] = 0.7
        body["sets"][1]["rows"][0]["temperature"] = None  # null: 1
        st, out, _ = self.call("POST", "/v1/score", body)
        self.assertEqual(st, 200, out)
        m = self.pod.current.model
        want, _ = m.score_rows([row, row + (0.7,), row])
        got = out["results"][0]["scores"] + out["results"][1]["scores"]
        self.assertClose(got, want)
        self.assertNotEqual(got[0], got[1])
        for bad in (0, -1.5, "1", True):
            body["sets"][0]["rows"][1]["temperature"] = bad
            st, out, _ = self.call("POST", "/v1/score", body)
            self.assertEqual((st, out["code"], out.get("item")), (400, "bad_request", 0), out)
            self.assertIn("temperature", out["error"])

    def test_attention_matches_the_model(self):
        toks = list(range(60))
        steps = [{"action": [5, 20], "observation": [20, 30]}, {"action": [30, 40], "observation": None},
                 {"action": [40, 60], "observation": [60, 60]}]
        st, body, _ = self.call("POST", "/v1/attention",
                                {"jobs": [{"id": "j", "tokens": b64(toks), "steps": steps, "layers": [2, 0]}]})
        self.assertEqual(st, 200, body)
        want = self.pod.current.model.step_graphs(toks, [((5, 20), (20, 30)), ((30, 40), None),
                                                         ((40, 60), None)], [2, 0])
        got = body["results"][0]["graphs"]
        self.assertEqual([g["layer"] for g in got], [2, 0])
        for g, (l, aa, ao) in zip(got, want):
            self.assertClose(g["aa"], aa)
            self.assertClose(g["ao"], ao)

    def test_protocol_errors(self):
        ok = self.score_body([[([1, 2], [3], (0, 1))]])
        cases = [
            (("POST", "/v1/score", ok), {"token": None}, 401, "unauthorized"),
            (("POST", "/v1/score", ok), {"token": "wrong"}, 401, "unauthorized"),
            (("POST", "/v1/score", ok), {"header": False}, 400, "version_mismatch"),
            (("GET", "/v1/score", None), {}, 405, "method_not_allowed"),
            (("GET", "/nope", None), {}, 404, "not_found"),
            (("POST", "/v1/score", None), {"raw": b"{not json"}, 400, "bad_request"),
            (("POST", "/v1/score", {"sets": 3}), {}, 400, "bad_request"),
            (("POST", "/v1/attention", {"jobs": [{"tokens": 5}]}), {}, 400, "bad_request"),
            (("POST", "/v1/score", {"sets": [{"rows": [{"context": b64([1]), "target": b64([2]), "span": [0]}]}]}),
             {}, 400, "bad_request"),
            (("POST", "/v1/score", {"sets": [{"rows": [{"context": "@@", "target": b64([1]), "span": [0, 1]}]}]}),
             {}, 400, "bad_request"),
            (("POST", "/v1/score", {"sets": [{"rows": [{"context": b64([1]), "target": b64([1]), "span": [0, 1]}]}] * 51}),
             {}, 413, "too_large"),
            (("POST", "/v1/score", None), {"raw": b" " * 200001}, 413, "too_large"),
            (("POST", "/v1/attention", {"jobs": [{"tokens": b64([1] * 20001), "steps": [{"action": [0, 1]}],
                                                  "layers": [0]}]}), {}, 413, "too_large"),
        ]
        for (method, path, body), kw, status, code in cases:
            with self.subTest(path=path, status=status, kw=kw):
                st, b, r = self.call(method, path, body, **kw)
                self.assertEqual((st, b["code"]), (status, code), b)
                self.assertTrue(b["error"])
                self.assertEqual(r.getheader(PROTOCOL_HEADER), PROTOCOL_VERSION)
                if status == 401:
                    self.assertIn("Bearer", r.getheader("WWW-Authenticate"))
                if status == 405:
                    self.assertEqual(r.getheader("Allow"), "POST")
        logged = self.log.getvalue()
        self.assertIn('"status": 401', logged)
        self.assertNotIn(TOKEN, logged)  # the token is never logged

    def test_bad_items_are_named(self):
        body = self.score_body([[([1, 2], [3], (0, 1))], [([1, 2], [3, 4], (1, 3))]])
        st, b, _ = self.call("POST", "/v1/score", body)
        self.assertEqual((st, b["code"], b["item"], b["id"]), (400, "bad_request", 1, "s1"))
        self.assertIn("span [1, 3)", b["error"])
        for job, msg in (({"tokens": b64([1, 2, 3]), "steps": [{"action": [0, 2]}], "layers": [3]}, "layer 3"),
                         ({"tokens": b64([1, 200]), "steps": [{"action": [0, 2]}], "layers": [0]}, "vocabulary"),
                         ({"tokens": b64([1, 2, 3]), "steps": [{"action": [1, 2]}, {"action": [0, 3]}],
                           "layers": [0]}, "action range")):
            st, b, _ = self.call("POST", "/v1/attention", {"jobs": [{"tokens": b64([1, 2]), "steps": [
                {"action": [0, 1]}], "layers": [0]}, dict(job, id="x")]})
            self.assertEqual((st, b["item"], b["id"]), (400, 1, "x"), b)
            self.assertIn(msg, b["error"])

    def test_slot_is_free_before_the_answer_is_written(self):
        # A client that sends its requests one after another must never meet its own
        # previous request's slot: each answer is written after the slot is freed, while
        # the request still counts in flight (shutdown waits for the answer).
        seen = []
        send = Exchange._send

        async def spy(ex, status, *a, **kw):
            if ex.path.startswith("/v1/"):
                # in_flight >= 1, not == 1: an earlier test's request may still be
                # finishing its write (its client has read the answer already).
                seen.append((status, self.pod._slots._value, self.pod.in_flight >= 1))
            return await send(ex, status, *a, **kw)
        Exchange._send = spy
        try:
            ok = self.score_body([[([1, 2], [3], (0, 1))]])
            self.assertEqual(self.call("POST", "/v1/score", ok)[0], 200)
            self.assertEqual(self.call("POST", "/v1/score", raw=b"CFR1", headers=self.ROWS)[0], 400)
            self.assertEqual(self.call("POST", "/v1/attention", {"jobs": [{"tokens": b64([1, 2]), "layers": [0],
                                                                          "steps": [{"action": [0, 9]}]}]})[0], 400)
        finally:
            Exchange._send = send
        self.assertEqual(seen, [(200, 2, True), (400, 2, True), (400, 2, True)])

    def test_overload_and_draining_answer_503(self):
        ok = self.score_body([[([1, 2], [3], (0, 1))]])
        self.assertTrue(self.pod.enter() and self.pod.enter())  # hold both slots
        try:
            st, b, r = self.call("POST", "/v1/score", ok)
            self.assertEqual((st, b["code"], r.getheader("Retry-After")), (503, "overloaded", "1"))
        finally:
            for _ in range(2):
                self.pod.free_slot()
                self.pod.leave()
        self.pod.draining.set()
        try:
            self.assertEqual(self.call("GET", "/healthz")[0], 503)
            self.assertEqual(self.call("POST", "/v1/score", ok)[0], 503)
        finally:
            self.pod.draining.clear()
        self.assertEqual(self.call("POST", "/v1/score", ok)[0], 200)

    def test_hot_load_admin_and_watch(self):
        folder2 = os.path.join(self.dir, "m2")
        write_checkpoint(folder2, small_config(), seed=2, placeholder=96)
        with open(os.path.join(folder2, "policy_version"), "w") as f:
            f.write("17\n")
        row = self.score_body([[([1, 2, 3], [4, 5], (0, 2))]])
        s1 = self.call("POST", "/v1/score", row)[1]["results"][0]["scores"]
        # The admin token, not the scorer token, guards the admin endpoint.
        self.assertEqual(self.call("POST", "/v1/admin/load", {"model": folder2})[0], 401)
        st, info, _ = self.call("POST", "/v1/admin/load", {"model": folder2}, token="admin")
        self.assertEqual((st, info["policy_version"]), (200, 17), info)
        s2 = self.call("POST", "/v1/score", row)[1]["results"][0]["scores"]
        self.assertNotEqual(s1, s2)
        want = Model.load(folder2, device=DEVICE).score_rows([([1, 2, 3], [4, 5], (0, 2))])[0]
        self.assertClose(s2, want)
        st, b, _ = self.call("POST", "/v1/admin/load", {"model": os.path.join(self.dir, "none")}, token="admin")
        self.assertEqual((st, b["code"]), (400, "bad_request"))
        self.assertEqual(self.call("GET", "/v1/info")[1]["policy_version"], 17)
        # Watching: a changed policy_version file reloads the folder.
        stop = threading.Event()
        self.pod.watch(0.05, stop)
        with open(os.path.join(folder2, "policy_version"), "w") as f:
            f.write("18\n")
        deadline = time.time() + 30
        while self.pod.current.policy_version != 18 and time.time() < deadline:
            time.sleep(0.05)
        stop.set()
        self.assertEqual(self.call("GET", "/v1/info")[1]["policy_version"], 18)
        # Back to the first model for the other tests.
        st, _, _ = self.call("POST", "/v1/admin/load", {"model": self.folder, "policy_version": 4}, token="admin")
        self.assertEqual(st, 200)

    # ----- binary bodies (feature "binary") ----------------------------------------------

    BINARY_SETS = [
        {"id": "full", "rows": [{"context": [1, 2, 3, 4, 5], "target": [6, 7, 8], "span": (0, 3)},
                                {"context": [1, 2, 3, 96, 5], "target": [6, 7, 8], "span": (1, 3),
                                 "temperature": 0.7}]},
        {"id": "compact", "tokens": [1, 2, 3, 4, 5, 6, 7, 8], "target": [9, 10, 11], "span": (0, 3), "rows": [
            {"pieces": [(0, 8)], "temperature": 0.7},
            {"pieces": [(0, 3), [96], (5, 8)], "temperature": 0.7},
            {"pieces": [(0, 5)], "span": (1, 2)},
            {"pieces": [], "span": (1, 3), "temperature": 1.5},
            {"context": [4, 4], "target": [1], "span": (0, 1)}]},
    ]
    ROWS = {"Content-Type": "application/vnd.creditflow.rows"}

    def test_info_advertises_binary(self):
        self.assertIn("binary", self.call("GET", "/v1/info")[1]["features"])

    def test_binary_score_answers_as_json(self):
        st, want, _ = self.call("POST", "/v1/score", json_rows(self.BINARY_SETS))
        self.assertEqual(st, 200, want)
        for ctype in ("application/vnd.creditflow.rows", "Application/VND.Creditflow.Rows; version=1"):
            with self.subTest(ctype=ctype):
                st, got, r = self.call("POST", "/v1/score", raw=encode_rows(self.BINARY_SETS),
                                       headers={"Content-Type": ctype})
                self.assertEqual(st, 200, got)
                self.assertEqual(r.getheader("Content-Type"), "application/json")
                self.assertEqual(r.getheader(PROTOCOL_HEADER), PROTOCOL_VERSION)
                if ON_CPU:
                    self.assertEqual(got, want)  # scores to the bit, usage, policy_version
                else:
                    self.assertEqual({k: v for k, v in got.items() if k != "results"},
                                     {k: v for k, v in want.items() if k != "results"})
                    for g, w in zip(got["results"], want["results"]):
                        self.assertClose(g["scores"], w["scores"])
        # And they are the model's scores of the expanded rows.
        cur = self.pod.current
        rows = [r for _, rs in parse_score_request(json_rows(self.BINARY_SETS), cur.info) for r in rs]
        self.assertClose([x for res in got["results"] for x in res["scores"]], cur.model.score_rows(rows)[0])

    def test_binary_score_errors_are_json(self):
        # Invalid rows: the JSON path's answer, item and id included.
        sets = [self.BINARY_SETS[0], {"id": "bad", "rows": [{"context": [1], "target": [500], "span": (0, 1)}]}]
        st, b, r = self.call("POST", "/v1/score", raw=encode_rows(sets), headers=self.ROWS)
        self.assertEqual((st, b["code"], b["item"], b["id"]), (400, "bad_request", 1, "bad"), b)
        self.assertEqual(b, self.call("POST", "/v1/score", json_rows(sets))[1])
        # Limits apply to the decoded rows and to the body's bytes.
        many = [{"rows": [{"context": [1], "target": [2], "span": (0, 1)}]}] * 51
        st, b, _ = self.call("POST", "/v1/score", raw=encode_rows(many), headers=self.ROWS)
        self.assertEqual((st, b["code"]), (413, "too_large"), b)
        st, b, _ = self.call("POST", "/v1/score", raw=b"CFR1" + b"\0" * 200000, headers=self.ROWS)
        self.assertEqual((st, b["code"]), (413, "too_large"), b)
        # A JSON body sent as binary is a malformed binary body.
        st, b, _ = self.call("POST", "/v1/score", raw=json.dumps(json_rows(sets)).encode(), headers=self.ROWS)
        self.assertEqual((st, b["code"]), (400, "bad_request"), b)

    def test_malformed_binary_bodies_are_400_never_500(self):
        for name, body in malformed_bodies():
            with self.subTest(name=name):
                st, b, r = self.call("POST", "/v1/score", raw=body, headers=self.ROWS)
                self.assertEqual((st, b["code"]), (400, "bad_request"), b)
                self.assertTrue(b["error"].startswith("binary score request"), b)
                self.assertEqual(r.getheader(PROTOCOL_HEADER), PROTOCOL_VERSION)
        # The server still serves after all of them.
        self.assertEqual(self.call("POST", "/v1/score", raw=encode_rows(self.BINARY_SETS), headers=self.ROWS)[0], 200)

    def test_attention_binary_graphs_equal_the_json_answer(self):
        toks = list(range(60))
        req = {"jobs": [{"id": "j", "tokens": b64(toks), "layers": [2, 0],
                         "steps": [{"action": [5, 20], "observation": [20, 30]},
                                   {"action": [30, 40], "observation": None},
                                   {"action": [40, 60], "observation": [60, 60]}]},
                        {"id": "k", "tokens": b64([3, 1, 4, 1, 5]), "layers": [1],
                         "steps": [{"action": [0, 2]}]}]}
        st, want, r = self.call("POST", "/v1/attention", req)
        self.assertEqual((st, r.getheader("Content-Type")), (200, "application/json"), want)
        self.assertIn("policy_version", want)
        for accept in ("application/vnd.creditflow.graphs",
                       "application/json, Application/Vnd.Creditflow.Graphs;q=0.9"):
            with self.subTest(accept=accept):
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                c.request("POST", "/v1/attention", body=json.dumps(req).encode(),
                          headers={"Authorization": f"Bearer {TOKEN}", PROTOCOL_HEADER: PROTOCOL_VERSION,
                                   "Accept": accept})
                r = c.getresponse()
                body = r.read()
                c.close()
                self.assertEqual(r.status, 200, body[:200])
                self.assertEqual(r.getheader("Content-Type"), "application/vnd.creditflow.graphs")
                self.assertEqual(r.getheader(PROTOCOL_HEADER), PROTOCOL_VERSION)
                got = decode_graphs(body)
                if ON_CPU:
                    self.assertEqual(got, want)  # every float64 and the policy version
                else:
                    shape = lambda a: (a["policy_version"], [[g["layer"] for g in j["graphs"]]  # noqa: E731
                                                             for j in a["results"]])
                    self.assertEqual(shape(got), shape(want))
                    for gj, wj in zip(got["results"], want["results"]):
                        for g, w in zip(gj["graphs"], wj["graphs"]):
                            self.assertClose(g["aa"], w["aa"])
                            self.assertClose(g["ao"], w["ao"])
        # Errors stay JSON.
        bad_req = {"jobs": [{"tokens": b64([1, 2]), "steps": [{"action": [0, 1]}], "layers": [7]}]}
        st, b, r = self.call("POST", "/v1/attention", bad_req,
                             headers={"Accept": "application/vnd.creditflow.graphs"})
        self.assertEqual((st, b["code"], r.getheader("Content-Type")), (400, "bad_request", "application/json"))

    def test_nan_scores_travel_as_null(self):
        m = self.pod.current.model
        saved = m.net.norm
        m.net.norm = torch.full_like(saved, float("nan"))
        try:
            st, b, _ = self.call("POST", "/v1/score", self.score_body([[([1, 2], [3], (0, 1))]]))
        finally:
            m.net.norm = saved
        self.assertEqual((st, b["results"][0]["scores"]), (200, [None]))


if __name__ == "__main__":
    unittest.main()
