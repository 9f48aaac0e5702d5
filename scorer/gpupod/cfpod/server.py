"""The scorer pod's HTTP server: the creditflow.scorer/v1 protocol (docs/scorer-protocol.md;
the Go server in scorer/server/server.go is the reference) over a torch model, plus hot loading of
new policy versions, served by uvicorn (an ASGI server on h11; scorer/gpupod/README.md says why).

Guarantees (the same as the Go server's):
- every answer other than 200 carries a JSON body {"error", "code"[, "item", "id"]} and the
  status the protocol assigns: 400 invalid input (bad_request) or a missing/different
  protocol header (version_mismatch), 401 missing or wrong bearer token, 403 the admin
  endpoint while the pod has no admin token (forbidden), 404, 405, 413 over
  a limit (too_large) or when the request did not fit the accelerator's memory (out_of_memory,
  naming the largest request that has fit; the client dead-letters a set that alone does
  not fit instead of retrying it), 503 over the concurrency limit, shutting down or after an
  unrecoverable accelerator error (overloaded), 500
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
- requests over the concurrency limit are refused at once, never queued: the slot is taken
  on the event loop before the body is read, and every admitted request has a worker thread
  of its own; a request's slot is freed before its answer is written, so a client that has
  its answer never meets its own previous request's slot (shutdown still waits for the
  answer); model work runs one request at a time (one device stream), in arrival order of
  the lock;
- the bearer token is compared in constant time and never logged; /healthz, /livez and
  /metrics stay open; /v1/admin/load takes the admin token only, and is disabled without one;
- /livez and /healthz come from the model (health.py): a canary forward when idle, 503 after
  a failed canary, a stalled call or an unrecoverable accelerator error;
- a hot load (POST /v1/admin/load, SIGHUP, a changed policy_version file, or a policy
  announcement on Kafka, see follow.py) builds the new model next to the old one and swaps
  it in between requests: a request is answered entirely by the model it started with, and
  its answer's "policy_version" names that model's version. A failed load keeps the old
  model serving.
"""
import asyncio
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn

from .binary import (MEDIA_GRAPHS, MEDIA_JOBS, MEDIA_LOWER_GRAPHS, MEDIA_ROWS, accepts, decode_jobs, decode_rows,
                     encode_graphs, encode_lower_graphs, media_type)
from .health import PATH_LIVE
from .log import Logger  # noqa: F401
from .model import ModelError
from .pod import POLICY_VERSION_FILE, Loaded, Pod, read_policy_version  # noqa: F401
from .protocol import (PATH_ADMIN_LOAD, PATH_ATTENTION, PATH_HEALTH, PATH_INFO,  # noqa: F401
                       PATH_METRICS, PATH_SCORE, PROTOCOL_HEADER, PROTOCOL_VERSION, Reject,
                       bad, decode_tokens, parse_attention_request, parse_score_request)

SERVER_NAME = b"creditflow-scorer-pod"


class Disconnected(Exception):
    """The client went away before its request was read."""


class Exchange:
    """One request and its answer: what the handlers read (command, path, headers,
    client_address, the body) and write (_send)."""

    def __init__(self, scope, receive, send):
        self.command = scope["method"]
        qs = scope.get("query_string") or b""
        self.path = scope["path"] + ("?" + qs.decode("latin-1") if qs else "")
        self.route = scope["path"]
        self.headers = {}
        for k, v in scope["headers"]:
            self.headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
        self.client_address = scope.get("client") or ("", 0)
        self._receive, self._asgi_send = receive, send
        self.close_connection = False

    def header(self, name):
        return self.headers.get(name.lower())

    async def _send(self, status, body, content_type="application/json", extra=None):
        data = body if isinstance(body, bytes) else (json.dumps(body, allow_nan=False) + "\n").encode()
        h = [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode()),
             (b"server", SERVER_NAME)]
        if content_type in ("application/json", MEDIA_GRAPHS, MEDIA_LOWER_GRAPHS):
            h.append((PROTOCOL_HEADER.encode(), PROTOCOL_VERSION.encode()))
        if status == 503:
            h.append((b"retry-after", b"1"))
        if status == 401:
            h.append((b"www-authenticate", b'Bearer realm="creditflow-scorer"'))
        for k, v in (extra or {}).items():
            h.append((k.lower().encode(), v.encode()))
        if self.close_connection:
            h.append((b"connection", b"close"))
        await self._asgi_send({"type": "http.response.start", "status": status, "headers": h})
        await self._asgi_send({"type": "http.response.body", "body": data})

    async def _error(self, rej, extra=None):
        await self._send(rej.status, rej.body(), extra=extra)

    async def read_body(self, limit):
        """The request body, at most limit bytes (413 too_large over it: the answer goes out
        at once and the server reads and drops the rest of the body, or closes the
        connection after the answer when the body is far over the limit or of unknown
        length)."""
        cl = self.header("Content-Length")
        if cl is not None:
            n = int(cl)  # h11 refuses a Content-Length that is not an integer
            if n > limit:
                self.close_connection = n > 16 * limit
                raise _too_big(limit)
        chunks, total = [], 0
        while True:
            msg = await self._receive()
            if msg["type"] == "http.disconnect":
                raise Disconnected()
            b = msg.get("body", b"")
            total += len(b)
            if total > limit:
                self.close_connection = True
                raise _too_big(limit)
            chunks.append(b)
            if not msg.get("more_body", False):
                return b"".join(chunks)


def _too_big(limit):
    return Reject(413, "too_large", f"request body exceeds the scorer's limit of {limit} bytes; "
                                    "send fewer rows per request")


class App:
    """The protocol as an ASGI application. Score and attention work runs on a pool of
    max_concurrent threads (one per admitted request); admin loads and canaries on a small
    pool of their own; everything else on the event loop."""

    def __init__(self, pod):
        self.pod = pod
        self.work = ThreadPoolExecutor(max_workers=max(1, pod.max_concurrent), thread_name_prefix="cfpod-work")
        self.other = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cfpod-admin")

    def close(self):
        self.work.shutdown(wait=False)
        self.other.shutdown(wait=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        ex = Exchange(scope, receive, send)
        try:
            await self._route(ex)
        except Disconnected:
            pass

    async def _offload(self, pool, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    # ----- plumbing ------------------------------------------------------------------

    def _done(self, ex, op, status, start, items=0, error=""):
        pod = self.pod
        d = time.monotonic() - start
        pod.m_requests.inc(1, op, str(status))
        pod.m_duration.observe(d, op)
        kw = dict(op=op, method=ex.command, path=ex.path, status=status, duration_ms=round(d * 1000, 3),
                  remote=ex.client_address[0])
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

    def _guard(self, ex, method, admin=False):
        if ex.command != method:
            raise Reject(405, "method_not_allowed", f"{ex.route} takes {method}, not {ex.command}")
        if admin and not self.pod.admin_token:
            raise Reject(403, "forbidden", "the admin endpoint is disabled: this scorer was started without "
                                           "--admin-token-file")
        if not self.pod.authorized(ex.header("Authorization"), admin):
            raise Reject(401, "unauthorized", "missing or wrong bearer token: send 'Authorization: Bearer "
                                              "<token>' with the " + ("admin token" if admin else "token")
                         + " the scorer was started with")
        if method == "POST":
            v = ex.header(PROTOCOL_HEADER)
            if v != PROTOCOL_VERSION:
                raise Reject(400, "version_mismatch", f"request header {PROTOCOL_HEADER} is "
                                                      f"{json.dumps(v or '')}; this scorer speaks "
                                                      f"{json.dumps(PROTOCOL_VERSION)}")

    # ----- routing -------------------------------------------------------------------

    async def _route(self, ex):
        path = ex.route
        pod = self.pod
        if path == PATH_HEALTH:
            if pod.draining.is_set():
                return await ex._error(Reject(503, "overloaded", "scorer is shutting down"))
            why = pod.health.unready()
            if why:
                return await ex._error(Reject(503, "overloaded", f"scorer cannot serve: {why}"))
            return await ex._send(200, {"status": "ok", "protocol": PROTOCOL_VERSION,
                                        "policy_version": pod.current.policy_version})
        if path == PATH_LIVE:
            ok, body = await self._offload(self.other, pod.health.live, pod.canary)
            if not ok:
                return await ex._error(Reject(503, "overloaded", f"scorer is not live: {body['error']}"))
            return await ex._send(200, dict(body, protocol=PROTOCOL_VERSION))
        if path == PATH_METRICS:
            return await ex._send(200, pod.registry.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        if path == PATH_INFO:
            return await self._info(ex)
        if path == PATH_SCORE:
            return await self._work(ex, "score", pod.score)
        if path == PATH_ATTENTION:
            return await self._work(ex, "attention", pod.attention)
        if path == PATH_ADMIN_LOAD:
            return await self._admin_load(ex)
        await ex._error(Reject(404, "not_found", f"no endpoint {path}; the protocol serves {PATH_INFO}, {PATH_SCORE}, "
                                                 f"{PATH_ATTENTION}, {PATH_HEALTH} and {PATH_METRICS} (and "
                                                 f"{PATH_LIVE}, {PATH_ADMIN_LOAD})"))

    async def _info(self, ex):
        start = time.monotonic()
        try:
            self._guard(ex, "GET")
            await ex._send(200, self.pod.info())
            self._done(ex, "info", 200, start)
        except Reject as r:
            await ex._error(r, {"Allow": "GET"} if r.status == 405 else None)
            self._done(ex, "info", r.status, start, error=r.message)

    async def _work(self, ex, op, fn):
        pod = self.pod
        start = time.monotonic()
        entered = slot = False
        ex.items = 0
        try:
            self._guard(ex, "POST")
            if pod.draining.is_set():
                raise Reject(503, "overloaded", "scorer is shutting down; send the request to another endpoint")
            if pod.health.broken:
                raise Reject(503, "overloaded", "scorer's accelerator failed and the scorer is restarting; send the "
                                                f"request to another endpoint ({pod.health.broken})")
            if not pod.enter():
                raise Reject(503, "overloaded", f"scorer is serving its limit of {pod.max_concurrent} concurrent "
                                                "requests; retry later or on another endpoint")
            entered = slot = True
            body = await ex.read_body(pod.max_request_bytes)
            out, ctype = await self._offload(self.work, self._compute, ex, op, fn, body)
            slot = self._free_slot(slot)
            await ex._send(200, out, ctype)
            self._done(ex, op, 200, start, ex.items)
        except Disconnected:
            raise
        except Reject as r:
            slot = self._free_slot(slot)
            await ex._error(r, {"Allow": "POST"} if r.status == 405 else None)
            self._done(ex, op, r.status, start, ex.items, r.message)
        except Exception as e:  # noqa: BLE001 - every failure must become a protocol answer
            # (running out of memory in model work is a 413 out_of_memory: Pod.run_model)
            r = Reject(500, "internal", f"{type(e).__name__}: {e}")
            slot = self._free_slot(slot)
            await ex._error(r)
            self._done(ex, op, r.status, start, ex.items, r.message)
        finally:
            self._free_slot(slot)
            if entered:
                pod.leave()

    def _compute(self, ex, op, fn, body):
        """Runs on a worker thread: decodes the body, runs fn, encodes its answer."""
        req = self._decode_request(ex, op, body)
        if isinstance(req, dict):
            lst = req.get("sets", req.get("jobs"))
            ex.items = len(lst) if isinstance(lst, list) else 0
        resp = fn(req)
        if op == "attention" and accepts(ex.header("Accept"), MEDIA_LOWER_GRAPHS):
            return encode_lower_graphs(resp), MEDIA_LOWER_GRAPHS
        if op == "attention" and accepts(ex.header("Accept"), MEDIA_GRAPHS):
            return encode_graphs(resp), MEDIA_GRAPHS
        return resp, "application/json"

    def _free_slot(self, held):
        """Frees the request's concurrency slot if it still holds it (see Pod.free_slot)."""
        if held:
            self.pod.free_slot()
        return False

    @staticmethod
    def _decode_request(ex, op, body):
        """The request body as json.loads gives it; a binary score body (Content-Type
        application/vnd.creditflow.rows) or attention body (application/vnd.creditflow.jobs)
        decodes to the same structure (binary.decode_rows, binary.decode_jobs)."""
        if op == "score" and media_type(ex.header("Content-Type")) == MEDIA_ROWS:
            return decode_rows(body)
        if op == "attention" and media_type(ex.header("Content-Type")) == MEDIA_JOBS:
            return decode_jobs(body)
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise bad(f"request body is not valid JSON for {op}: {e}") from None

    async def _admin_load(self, ex):
        """POST /v1/admin/load {"model": folder (default: the current one), "policy_version": n
        (default: the folder's policy_version file, else current + 1)}, with the admin token."""
        pod = self.pod
        start = time.monotonic()
        try:
            self._guard(ex, "POST", admin=True)
            body = await ex.read_body(pod.max_request_bytes)
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
                await self._offload(self.other, pod.load, folder, pv)
            except (ModelError, OSError) as e:
                raise bad(f"loading {folder} failed, the previous model keeps serving: {e}") from None
            await ex._send(200, pod.info())
            self._done(ex, "admin_load", 200, start)
        except Disconnected:
            raise
        except Reject as r:
            await ex._error(r, {"Allow": "POST"} if r.status == 405 else None)
            self._done(ex, "admin_load", r.status, start, error=r.message)
        except Exception as e:  # noqa: BLE001 - every failure must become a protocol answer
            r = Reject(500, "internal", f"loading failed, the previous model keeps serving: {type(e).__name__}: {e}")
            await ex._error(r)
            self._done(ex, "admin_load", r.status, start, error=r.message)


class _LogBridge(logging.Handler):
    """uvicorn's own warnings and errors (invalid requests, failed handshakes) as the pod's
    JSON log lines."""

    def __init__(self, log):
        super().__init__(logging.WARNING)
        self.log = log

    def emit(self, record):
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad log record must not fail the server
            msg = str(record.msg)
        (self.log.error if record.levelno >= logging.ERROR else self.log.warn)(msg, source="uvicorn")


class PodServer:
    """uvicorn serving pod on an already bound socket (port 0 picks a free one;
    server_address names the bound address at once). serve_forever blocks until shutdown
    (from another thread): uvicorn then stops accepting, closes idle keep-alive
    connections, and waits for answers in progress up to the grace given to shutdown."""

    def __init__(self, pod, host, port, tls_cert=None, tls_key=None, keep_alive=120):
        self.app = App(pod)
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without
        # it every answer written in two parts waits ~40 ms for the client's delayed ACK.
        self.socket = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.socket.listen(2048)
        self.server_address = self.socket.getsockname()[:2]
        for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
            lg = logging.getLogger(name)
            lg.handlers = [_LogBridge(pod.log)]
            lg.propagate = False
        config = uvicorn.Config(self.app, http="h11", loop="asyncio", lifespan="off", log_config=None,
                                access_log=False, server_header=False, proxy_headers=False,
                                timeout_keep_alive=keep_alive, timeout_graceful_shutdown=5,
                                ssl_certfile=tls_cert, ssl_keyfile=tls_key)
        config.load()  # a bad certificate fails here, before serving
        self.server = uvicorn.Server(config)
        self._stopped = threading.Event()

    def serve_forever(self, poll_interval=None):  # noqa: ARG002 - socketserver's signature
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self, grace=5.0):
        """Stops serving; answers in progress get grace seconds to finish."""
        self.server.config.timeout_graceful_shutdown = max(0.1, grace)
        self.server.should_exit = True
        self._stopped.wait()

    def server_close(self):
        self.socket.close()
        self.app.close()


def make_server(pod, host, port, tls_cert=None, tls_key=None, keep_alive=120):
    """A PodServer serving pod on host:port (port 0 picks a free one)."""
    return PodServer(pod, host, port, tls_cert, tls_key, keep_alive)
