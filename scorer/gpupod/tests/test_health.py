"""Liveness and readiness from the model (cfpod/health.py), the pod's exit after an
unrecoverable accelerator error, the admin endpoint's token, and the HTTP server's
concurrency limit, keep-alive and drain (cfpod/server.py)."""

import http.client
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from cfpod.health import EXIT_ACCELERATOR, FAULT_ENV, Health, sticky_accelerator_error
from cfpod.server import PROTOCOL_HEADER, PROTOCOL_VERSION, Logger, Pod, make_server
from tests.test_server import b64
from tests.util import DEVICE, ON_CPU, small_config, write_checkpoint

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "t0ken"
ROW = {"sets": [{"id": "s", "rows": [{"context": b64([1, 2, 3]), "target": b64([4, 5]), "span": [0, 2]}]}]}


def call(port, method, path, body=None, token=TOKEN, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    h = {PROTOCOL_HEADER: PROTOCOL_VERSION}
    if token:
        h["Authorization"] = f"Bearer {token}"
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
    r = c.getresponse()
    out = r.read()
    if conn is None:
        c.close()
    return r.status, (json.loads(out) if (r.getheader("Content-Type") or "").startswith("application/json") else out)


class _Served(unittest.TestCase):
    """A pod on a tiny checkpoint behind the real server, one per test."""

    health_args = {}
    pod_args = {}

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.folder = os.path.join(self.dir, "m")
        write_checkpoint(self.folder, small_config(), seed=1, placeholder=96)
        self.log = io.StringIO()
        log = Logger("info", self.log)
        self.health = Health(log, **self.health_args)
        self.fatal = []
        self.health.on_fatal = self.fatal.append
        self.pod = Pod(self.folder, device=DEVICE, token=TOKEN, log=log, health=self.health,
                       **dict({"admin_token": "adm1n"}, **self.pod_args))
        self.srv = make_server(self.pod, "127.0.0.1", 0)
        self.port = self.srv.server_address[1]
        t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        t.start()

        def stop():
            self.srv.shutdown(1)
            self.srv.server_close()
            t.join(10)
        self.addCleanup(stop)

    def call(self, method, path, body=None, token=TOKEN, conn=None):
        return call(self.port, method, path, body, token, conn)

    def slow_model(self, seconds):
        """Every score request's model work takes at least seconds."""
        m = self.pod.current.model
        real = m.score_plan

        def slow(planned):
            time.sleep(seconds)
            return real(planned)
        m.score_plan = slow
        self.addCleanup(lambda: m.__dict__.pop("score_plan", None))


class LivenessTest(_Served):
    health_args = {"interval": 0.0, "canary_timeout": 2.0, "stall": 30.0}

    def test_livez_runs_a_canary_when_idle(self):
        before = self.health.last_ok
        st, b = self.call("GET", "/livez", token=None)
        self.assertEqual((st, b["status"], b["model"]), (200, "ok", "canary"), b)
        self.assertGreater(self.health.last_ok, before)  # the canary ran through the model
        self.assertEqual(self.call("GET", "/healthz", token=None)[0], 200)

    def test_a_failing_canary_fails_liveness_and_readiness_until_the_model_works(self):
        m = self.pod.current.model
        m.score_rows = lambda rows: 1 / 0  # the canary's forward (not a sticky error)
        try:
            st, b = self.call("GET", "/livez", token=None)
            self.assertEqual((st, b["code"]), (503, "overloaded"), b)
            self.assertIn("ZeroDivisionError", b["error"])
            st, b = self.call("GET", "/healthz", token=None)
            self.assertEqual(st, 503, b)
            self.assertIn("canary failed", b["error"])
        finally:
            del m.score_rows
        # Not sticky: the pod serves on, and a successful call makes it ready again.
        self.assertEqual(self.call("POST", "/v1/score", ROW)[0], 200)
        self.assertEqual(self.call("GET", "/healthz", token=None)[0], 200)
        self.assertEqual(self.call("GET", "/livez", token=None)[0], 200)
        self.assertEqual(self.fatal, [])

    def test_a_hung_canary_fails_within_the_canary_timeout(self):
        m = self.pod.current.model
        release = threading.Event()
        m.score_rows = lambda rows: release.wait(30)
        self.addCleanup(release.set)
        t0 = time.monotonic()
        st, b = self.call("GET", "/livez", token=None)
        self.assertEqual(st, 503, b)
        self.assertIn("did not finish within 2 s", b["error"])
        self.assertLess(time.monotonic() - t0, 10)
        # A later probe waits on the same canary, not on a request's call.
        self.assertEqual(self.call("GET", "/livez", token=None)[0], 503)
        release.set()
        del m.score_rows

    def test_a_busy_model_is_alive_until_its_call_stalls(self):
        self.slow_model(1.5)
        out = []
        t = threading.Thread(target=lambda: out.append(self.call("POST", "/v1/score", ROW)))
        t.start()
        deadline = time.monotonic() + 10
        while self.health.busy_since is None and time.monotonic() < deadline:
            time.sleep(0.01)
        st, b = self.call("GET", "/livez", token=None)
        self.assertEqual((st, b["model"]), (200, "busy"), b)  # no canary behind a running request
        self.health.stall = 0.2
        time.sleep(0.3)
        st, b = self.call("GET", "/livez", token=None)
        self.assertEqual(st, 503, b)
        self.assertIn("stall timeout", b["error"])
        self.assertEqual(self.call("GET", "/healthz", token=None)[0], 503)
        t.join(30)
        self.assertEqual(out[0][0], 200)
        self.assertEqual(self.call("GET", "/livez", token=None)[0], 200)  # the call finished

    def test_a_sticky_accelerator_error_breaks_the_pod_for_good(self):
        m = self.pod.current.model

        def assert_fails(planned):
            raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA`")
        m.score_plan = assert_fails
        self.addCleanup(lambda: m.__dict__.pop("score_plan", None))
        st, b = self.call("POST", "/v1/score", ROW)
        self.assertEqual((st, b["code"]), (500, "internal"), b)
        self.assertIn("device-side assert", b["error"])
        self.assertEqual(len(self.fatal), 1)
        self.assertIn("device-side assert", self.fatal[0])
        del m.score_plan  # even with a working model the pod stays broken (CUDA would not recover)
        for path in ("/livez", "/healthz"):
            st, b = self.call("GET", path, token=None)
            self.assertEqual(st, 503, (path, b))
            self.assertIn("unrecoverable accelerator error", b["error"])
        st, b = self.call("POST", "/v1/score", ROW)
        self.assertEqual((st, b["code"]), (503, "overloaded"), b)
        self.assertIn("restarting", b["error"])
        self.assertEqual(len(self.fatal), 1)  # on_fatal once
        self.assertIn('"exit_status": 3', self.log.getvalue())

    def test_sticky_messages(self):
        for msg in ("CUDA error: an illegal memory access was encountered",
                    "CUDA error: unspecified launch failure", "CUDA error: uncorrectable ECC error encountered",
                    "CUDA error: device-side assert triggered", "CUDA error: misaligned address"):
            self.assertTrue(sticky_accelerator_error(RuntimeError(msg)), msg)
        for msg in ("CUDA out of memory. Tried to allocate 2.00 GiB", "division by zero",
                    "Expected all tensors to be on the same device"):
            self.assertFalse(sticky_accelerator_error(RuntimeError(msg)), msg)

    def test_a_hot_load_whose_forward_fails_keeps_the_old_model(self):
        fault = os.path.join(self.dir, "fault")
        with open(fault, "w") as f:
            f.write("RuntimeError: broken kernel (injected)")
        self.health.fault_file = fault
        try:
            with self.assertRaises(RuntimeError):
                self.pod.load(self.folder, 9)
        finally:
            self.health.fault_file = None
        self.assertEqual(self.pod.current.policy_version, 0)
        self.assertEqual(self.fatal, [])


class AdminDisabledTest(_Served):
    pod_args = {"admin_token": ""}

    def test_admin_load_needs_its_own_token(self):
        for token in (TOKEN, None, "adm1n"):
            st, b = self.call("POST", "/v1/admin/load", {"model": self.folder}, token=token)
            self.assertEqual((st, b["code"]), (403, "forbidden"), b)
            self.assertIn("--admin-token-file", b["error"])
        self.assertEqual(self.call("GET", "/v1/admin/load")[0], 405)


class ServerBehaviourTest(_Served):
    pod_args = {"max_concurrent": 2}

    def test_over_the_limit_is_503_at_once_never_queued(self):
        self.slow_model(1.0)
        out = []
        ts = [threading.Thread(target=lambda: out.append(self.call("POST", "/v1/score", ROW))) for _ in range(2)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 10
        while self.pod.in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        st, b = self.call("POST", "/v1/score", ROW)
        self.assertLess(time.monotonic() - t0, 0.5)
        self.assertEqual((st, b["code"]), (503, "overloaded"), b)
        for t in ts:
            t.join(30)
        self.assertEqual(sorted(s for s, _ in out), [200, 200])

    def test_keep_alive_and_binary_headers(self):
        # asyncio sets TCP_NODELAY on accepted sockets only when the listener names IPPROTO_TCP.
        self.assertEqual(self.srv.socket.proto, socket.IPPROTO_TCP)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.addCleanup(c.close)
        self.assertEqual(self.call("POST", "/v1/score", ROW, conn=c)[0], 200)
        sock = c.sock
        self.assertEqual(self.call("GET", "/v1/info", conn=c)[0], 200)
        self.assertIs(c.sock, sock)  # the same connection served both
        c.request("HEAD", "/healthz")
        r = c.getresponse()
        self.assertEqual((r.status, r.read(), r.getheader("Server")), (200, b"", "creditflow-scorer-pod"))

    def test_drain_answers_in_flight_requests_and_refuses_new_work(self):
        self.slow_model(1.0)
        out = []
        t = threading.Thread(target=lambda: out.append(self.call("POST", "/v1/score", ROW)))
        t.start()
        deadline = time.monotonic() + 10
        while self.pod.in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.pod.draining.set()  # what SIGTERM does first (cfpod/__main__.py)
        st, b = self.call("POST", "/v1/score", ROW)
        self.assertEqual((st, b["code"]), (503, "overloaded"), b)
        self.assertEqual(self.call("GET", "/healthz", token=None)[0], 503)
        self.assertEqual(self.call("GET", "/livez", token=None)[0], 200)  # draining is not dead
        self.assertTrue(self.pod.wait_idle(30))
        t.join(30)
        self.assertEqual(out[0][0], 200)
        self.srv.shutdown(1)
        with self.assertRaises(OSError):
            self.call("GET", "/healthz", token=None)


@unittest.skipUnless(ON_CPU, "CPU-only: starts the pod as a process on CPU")
class ProcessTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.folder = os.path.join(self.dir, "m")
        write_checkpoint(self.folder, small_config(), seed=1, placeholder=96)
        with open(os.path.join(self.dir, "token"), "w") as f:
            f.write(TOKEN + "\n")

    def run_pod(self, *args, env=None):
        return subprocess.run([sys.executable, "-m", "cfpod", "--model", self.folder, "--device", "cpu", *args],
                              cwd=HERE, env=dict(os.environ, **(env or {})), capture_output=True, text=True,
                              timeout=120)

    def test_scoring_needs_a_token_or_the_explicit_flag(self):
        for args, want in (((), "no scoring token"),
                           (("--token-file", os.path.join(self.dir, "token"), "--insecure-no-token"),
                            "one or the other")):
            p = self.run_pod(*args, env={"CREDITFLOW_SCORER_TOKEN": ""})
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(want, p.stderr)

    def test_the_pod_exits_after_a_sticky_accelerator_error(self):
        # The injected error stands in for CUDA's: only an accelerator raises the real one.
        fault = os.path.join(self.dir, "fault")
        port_file = os.path.join(self.dir, "port")
        env = dict(os.environ, **{FAULT_ENV: fault})
        p = subprocess.Popen([sys.executable, "-m", "cfpod", "--model", self.folder, "--device", "cpu",
                              "--addr", "127.0.0.1:0", "--port-file", port_file, "--token-file",
                              os.path.join(self.dir, "token"), "--liveness-interval", "0", "--threads", "1"],
                             cwd=HERE, env=env, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.stderr.close)
        self.addCleanup(lambda: p.poll() is None and p.kill())

        def read_port():
            try:
                with open(port_file) as f:
                    text = f.read()
            except FileNotFoundError:
                return None
            return int(text) if text.endswith("\n") else None
        deadline = time.monotonic() + 90
        while (port := read_port()) is None:
            self.assertIsNone(p.poll(), "the pod exited before listening")
            self.assertLess(time.monotonic(), deadline, "the pod did not start")
            time.sleep(0.05)
        st, b = call(port, "GET", "/livez", token=None)
        self.assertEqual((st, b["model"]), (200, "canary"), b)
        self.assertEqual(call(port, "POST", "/v1/score", ROW)[0], 200)
        with open(fault, "w") as f:
            f.write("CUDA error: an illegal memory access was encountered")
        st, b = call(port, "GET", "/livez", token=None)  # the canary meets the error
        self.assertEqual(st, 503, b)
        self.assertIn("illegal memory access", b["error"])
        self.assertEqual(p.wait(60), EXIT_ACCELERATOR)
        log = [json.loads(line) for line in p.stderr.read().splitlines() if line.startswith("{")]
        errs = [r for r in log if r["level"] == "error" and "unrecoverable accelerator error" in r["message"]]
        self.assertTrue(errs, log)
        self.assertIn("illegal memory access", errs[0]["error"])
        self.assertEqual(errs[-1]["exit_status"], EXIT_ACCELERATOR)


if __name__ == "__main__":
    unittest.main()
