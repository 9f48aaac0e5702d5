"""The scorer pod's HTTP server: the creditflow.scorer/v1 protocol (docs/scorer-protocol.md;
the Go server in gpu/server/server.go is the reference) over a torch model, plus hot loading of
new policy versions.

Guarantees (the same as the Go server's):
- every answer other than 200 carries a JSON body {"error", "code"[, "item", "id"]} and the
  status the protocol assigns: 400 invalid input (bad_request) or a missing/different
  protocol header (version_mismatch), 401 missing or wrong bearer token, 404, 405, 413 over
  a limit (too_large) or when the request did not fit the accelerator's memory (out_of_memory,
  naming the largest request that has fit; the client dead-letters a set that alone does
  not fit instead of retrying it), 503 over the concurrency limit or shutting down (overloaded), 500
  otherwise; every JSON answer and every binary answer carries the
  Creditflow-Scorer-Protocol header;
- feature "binary" (binary.py): a score request with Content-Type
  application/vnd.creditflow.rows is decoded into the JSON request's structure and served by
  the same code from there on; an attention request whose Accept lists
  application/vnd.creditflow.graphs gets its 200 answer as that body (errors stay JSON);
- features "binary_jobs" and "lower_graphs" (binary.py): an attention request with
  Content-Type application/vnd.creditflow.jobs is decoded into the JSON request's structure;
  one whose Accept lists application/vnd.creditflow.lower-graphs gets its graphs below their
  diagonals, summed where exact (preferred over the K×K body when both are listed);
- requests over the concurrency limit are refused at once, never queued; a request's slot
  is freed before its answer is written, so a client that has its answer never meets its own
  previous request's slot (shutdown still waits for the answer); model work runs one request
  at a time (one device stream), in arrival order of the lock;
- the bearer token is compared in constant time and never logged; /healthz and /metrics
  stay open;
- a hot load (POST /v1/admin/load, SIGHUP, a changed policy_version file, or a policy
  announcement on Kafka, see follow.py) builds the new model next to the old one and swaps
  it in between requests: a request is answered entirely by the model it started with, and
  its answer's "policy_version" names that model's version. A failed load keeps the old
  model serving.
"""
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .binary import (MEDIA_GRAPHS, MEDIA_JOBS, MEDIA_LOWER_GRAPHS, MEDIA_ROWS, accepts, decode_jobs, decode_rows,
                     encode_graphs, encode_lower_graphs, media_type)
from .log import Logger  # noqa: F401
from .model import ModelError
from .pod import POLICY_VERSION_FILE, Loaded, Pod, read_policy_version  # noqa: F401
from .protocol import (PATH_ADMIN_LOAD, PATH_ATTENTION, PATH_HEALTH, PATH_INFO,  # noqa: F401
                       PATH_METRICS, PATH_SCORE, PROTOCOL_HEADER, PROTOCOL_VERSION, Reject,
                       bad, decode_tokens, parse_attention_request, parse_score_request)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "creditflow-scorer-pod"
    pod = None  # set by make_server

    def log_message(self, fmt, *args):  # requests are logged as JSON by _done
        pass

    # ----- plumbing ------------------------------------------------------------------

    def _send(self, status, body, content_type="application/json", extra=None):
        data = body if isinstance(body, bytes) else (json.dumps(body, allow_nan=False) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if content_type in ("application/json", MEDIA_GRAPHS, MEDIA_LOWER_GRAPHS):
            self.send_header(PROTOCOL_HEADER, PROTOCOL_VERSION)
        if status == 503:
            self.send_header("Retry-After", "1")
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="creditflow-scorer"')
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, rej, extra=None):
        self._send(rej.status, rej.body(), extra=extra)

    def _done(self, op, status, start, items=0, error=""):
        pod = self.pod
        d = time.monotonic() - start
        pod.m_requests.inc(1, op, str(status))
        pod.m_duration.observe(d, op)
        kw = dict(op=op, method=self.command, path=self.path, status=status, duration_ms=round(d * 1000, 3),
                  remote=self.client_address[0])
        if items:
            kw["items"] = items
        if error:
            kw["error"] = error
        if status >= 500:
            pod.log.error("scorer request", **kw)
        elif status >= 400:
            pod.log.warn("scorer request", **kw)
        else:
            pod.log.debug("scorer request", **kw)

    def _read_body(self):
        pod = self.pod
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                chunks.append(self.rfile.read(size))
                if total > pod.max_request_bytes:
                    chunks = []
                self.rfile.readline(16)
            if total > pod.max_request_bytes:
                raise self._too_big()
            return b"".join(chunks)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise bad("Content-Length is not an integer") from None
        if n > pod.max_request_bytes:
            # Read and drop the body so that the answer reaches the client (closing with
            # unread data would reset the connection); give up on absurd sizes.
            if n <= 16 * pod.max_request_bytes:
                while n > 0:
                    chunk = self.rfile.read(min(n, 1 << 20))
                    if not chunk:
                        break
                    n -= len(chunk)
            else:
                self.close_connection = True
            raise self._too_big()
        return self.rfile.read(n) if n > 0 else b""

    def _too_big(self):
        return Reject(413, "too_large", f"request body exceeds the scorer's limit of "
                                        f"{self.pod.max_request_bytes} bytes; send fewer rows per request")

    def _guard(self, method, admin=False):
        if self.command != method:
            raise Reject(405, "method_not_allowed", f"{self.path} takes {method}, not {self.command}")
        if not self.pod.authorized(self.headers.get("Authorization"), admin):
            raise Reject(401, "unauthorized", "missing or wrong bearer token: send 'Authorization: Bearer "
                                              "<token>' with the token the scorer was started with")
        if method == "POST":
            v = self.headers.get(PROTOCOL_HEADER)
            if v != PROTOCOL_VERSION:
                raise Reject(400, "version_mismatch", f"request header {PROTOCOL_HEADER} is "
                                                      f"{json.dumps(v or '')}; this scorer speaks "
                                                      f"{json.dumps(PROTOCOL_VERSION)}")

    # ----- routing -------------------------------------------------------------------

    def _route(self):
        path = self.path.split("?", 1)[0]
        pod = self.pod
        if path == PATH_HEALTH:
            if pod.draining.is_set():
                return self._error(Reject(503, "overloaded", "scorer is shutting down"))
            return self._send(200, {"status": "ok", "protocol": PROTOCOL_VERSION,
                                    "policy_version": pod.current.policy_version})
        if path == PATH_METRICS:
            return self._send(200, pod.registry.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if path == PATH_INFO:
            return self._simple("info", "GET", lambda: pod.info())
        if path == PATH_SCORE:
            return self._work("score", pod.score)
        if path == PATH_ATTENTION:
            return self._work("attention", pod.attention)
        if path == PATH_ADMIN_LOAD:
            return self._admin_load()
        self._discard_body()
        self._error(Reject(404, "not_found", f"no endpoint {path}; the protocol serves {PATH_INFO}, {PATH_SCORE}, "
                                             f"{PATH_ATTENTION}, {PATH_HEALTH} and {PATH_METRICS} (and "
                                             f"{PATH_ADMIN_LOAD})"))

    def _discard_body(self):
        try:
            self._read_body()
        except Reject:
            pass

    def _simple(self, op, method, fn):
        start = time.monotonic()
        try:
            self._guard(method)
            self._send(200, fn())
            self._done(op, 200, start)
        except Reject as r:
            self._discard_body()
            self._error(r, {"Allow": method} if r.status == 405 else None)
            self._done(op, r.status, start, error=r.message)

    def _work(self, op, fn):
        pod = self.pod
        start = time.monotonic()
        entered = slot = False
        items = 0
        try:
            self._guard("POST")
            if pod.draining.is_set():
                raise Reject(503, "overloaded", "scorer is shutting down; send the request to another endpoint")
            if not pod.enter():
                raise Reject(503, "overloaded", f"scorer is serving its limit of {pod.max_concurrent} concurrent "
                                                "requests; retry later or on another endpoint")
            entered = slot = True
            req = self._decode_request(op, self._read_body())
            if isinstance(req, dict):
                lst = req.get("sets", req.get("jobs"))
                items = len(lst) if isinstance(lst, list) else 0
            resp = fn(req)
            if op == "attention" and accepts(self.headers.get("Accept"), MEDIA_LOWER_GRAPHS):
                body, ctype = encode_lower_graphs(resp), MEDIA_LOWER_GRAPHS
            elif op == "attention" and accepts(self.headers.get("Accept"), MEDIA_GRAPHS):
                body, ctype = encode_graphs(resp), MEDIA_GRAPHS
            else:
                body, ctype = resp, "application/json"
            slot = self._free_slot(slot)
            self._send(200, body, ctype)
            self._done(op, 200, start, items)
        except Reject as r:
            if not entered:
                self._discard_body()
            slot = self._free_slot(slot)
            self._error(r, {"Allow": "POST"} if r.status == 405 else None)
            self._done(op, r.status, start, items, r.message)
        except Exception as e:  # noqa: BLE001 - every failure must become a protocol answer
            # (running out of memory in model work is a 413 out_of_memory: Pod.run_model)
            r = Reject(500, "internal", f"{type(e).__name__}: {e}")
            slot = self._free_slot(slot)
            self._error(r)
            self._done(op, r.status, start, items, r.message)
        finally:
            self._free_slot(slot)
            if entered:
                pod.leave()

    def _free_slot(self, held):
        """Frees the request's concurrency slot if it still holds it (see Pod.free_slot)."""
        if held:
            self.pod.free_slot()
        return False

    def _decode_request(self, op, body):
        """The request body as json.loads gives it; a binary score body (Content-Type
        application/vnd.creditflow.rows) or attention body (application/vnd.creditflow.jobs)
        decodes to the same structure (binary.decode_rows, binary.decode_jobs)."""
        if op == "score" and media_type(self.headers.get("Content-Type")) == MEDIA_ROWS:
            return decode_rows(body)
        if op == "attention" and media_type(self.headers.get("Content-Type")) == MEDIA_JOBS:
            return decode_jobs(body)
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise bad(f"request body is not valid JSON for {op}: {e}") from None

    def _admin_load(self):
        """POST /v1/admin/load {"model": folder (default: the current one), "policy_version": n
        (default: the folder's policy_version file, else current + 1)}."""
        pod = self.pod
        start = time.monotonic()
        try:
            self._guard("POST", admin=True)
            body = self._read_body()
            try:
                req = json.loads(body or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise bad(f"request body is not valid JSON for admin load: {e}") from None
            if not isinstance(req, dict):
                raise bad('admin load takes an object {"model": folder, "policy_version": n}')
            folder = req.get("model") or pod.current.folder
            pv = req.get("policy_version")
            if not isinstance(folder, str) or (pv is not None and (not isinstance(pv, int) or isinstance(pv, bool))):
                raise bad('"model" must be a folder path and "policy_version" an integer')
            try:
                pod.load(folder, pv)
            except (ModelError, OSError) as e:
                raise bad(f"loading {folder} failed, the previous model keeps serving: {e}") from None
            self._send(200, pod.info())
            self._done("admin_load", 200, start)
        except Reject as r:
            self._error(r, {"Allow": "POST"} if r.status == 405 else None)
            self._done("admin_load", r.status, start, error=r.message)
        except Exception as e:  # noqa: BLE001 - every failure must become a protocol answer
            r = Reject(500, "internal", f"loading failed, the previous model keeps serving: {type(e).__name__}: {e}")
            self._error(r)
            self._done("admin_load", r.status, start, error=r.message)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = lambda self: self._route()  # noqa: E731


def make_server(pod, host, port, ssl_context=None):
    """A ThreadingHTTPServer serving pod on host:port (port 0 picks a free one)."""
    handler = type("PodHandler", (Handler,), {"pod": pod})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    if ssl_context is not None:
        srv.socket = ssl_context.wrap_socket(srv.socket, server_side=True)
    return srv
