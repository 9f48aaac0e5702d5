"""The scorer pod's HTTP server: the creditflow.scorer/v1 protocol (docs/scorer-protocol.md;
the Go server in gpu/server.go is the reference) over a torch model, plus hot loading of
new policy versions.

Guarantees (the same as the Go server's):
- every answer other than 200 carries a JSON body {"error", "code"[, "item", "id"]} and the
  status the protocol assigns: 400 invalid input (bad_request) or a missing/different
  protocol header (version_mismatch), 401 missing or wrong bearer token, 404, 405, 413 over
  a limit (too_large), 503 over the concurrency limit or shutting down (overloaded), 500
  otherwise; every JSON answer carries the Creditflow-Scorer-Protocol header;
- requests over the concurrency limit are refused at once, never queued; model work runs
  one request at a time (one device stream), in arrival order of the lock;
- the bearer token is compared in constant time and never logged; /healthz and /metrics
  stay open;
- a hot load (POST /v1/admin/load, SIGHUP, a changed policy_version file, or a policy
  announcement on Kafka, see follow.py) builds the new model next to the old one and swaps
  it in between requests: a request is answered entirely by the model it started with, and
  its answer's "policy_version" names that model's version. A failed load keeps the old
  model serving.
"""

import array
import base64
import binascii
import hmac
import json
import math
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from . import metrics as M
from .model import InputError, Model, ModelError

PROTOCOL_VERSION = "creditflow.scorer/v1"
PROTOCOL_HEADER = "Creditflow-Scorer-Protocol"
POLICY_VERSION_FILE = "policy_version"

PATH_INFO, PATH_SCORE, PATH_ATTENTION = "/v1/info", "/v1/score", "/v1/attention"
PATH_HEALTH, PATH_METRICS, PATH_ADMIN_LOAD = "/healthz", "/metrics", "/v1/admin/load"


class Reject(Exception):
    """An answer other than 200: status, protocol code, message, optional item index and id."""

    def __init__(self, status, code, message, item=None, id_=""):
        super().__init__(message)
        self.status, self.code, self.message, self.item, self.id = status, code, message, item, id_

    def body(self):
        b = {"error": self.message, "code": self.code}
        if self.item is not None:
            b["item"] = self.item
        if self.id:
            b["id"] = self.id
        return b


def bad(message, item=None, id_=""):
    return Reject(400, "bad_request", message, item, id_)


def decode_tokens(v, what):
    """A token array on the wire: base64 (standard alphabet, padded) of little-endian int32."""
    if v is None:
        return []
    if not isinstance(v, str):
        raise bad(f"{what}: token array must be a base64 string of little-endian int32")
    try:
        raw = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(f"{what}: token array is not valid base64: {e}") from None
    if len(raw) % 4:
        raise bad(f"{what}: token array has {len(raw)} bytes, not a multiple of 4 (int32 little-endian)")
    a = array.array("i")
    a.frombytes(raw)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tolist()


def _range(v, what):
    if (not isinstance(v, list) or len(v) != 2 or
            not all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise bad(f"{what} must be a list of two integers, got {v!r}")
    return int(v[0]), int(v[1])


def _score(x):
    return x if math.isfinite(x) else None


def _bad_token(ids, vocab):
    for k, t in enumerate(ids):
        if not 0 <= t < vocab:
            return k
    return -1


def parse_score_request(req, info, limits=None):
    """Decodes and validates a score request (the rules of gpu/errors.go validateSets).
    limits(rows, tokens) runs after decoding and before validating, as in the Go server.
    Returns [(id, [(context, target, (a, b), temperature)])]; an absent or null "temperature"
    is 1."""
    if not isinstance(req, dict) or not isinstance(req.get("sets"), list):
        raise bad('score request must be an object with a "sets" list')
    if limits:
        n_rows = n_tok = 0
        for s in req["sets"]:
            rows = s.get("rows") if isinstance(s, dict) else None
            for r in rows if isinstance(rows, list) else []:
                n_rows += 1
                if isinstance(r, dict):
                    n_tok += sum(len(x) * 3 // 16 for x in (r.get("context"), r.get("target")) if isinstance(x, str))
        limits(n_rows, n_tok)
    V, MC = info["vocab_size"], info["max_context"]
    out = []
    for i, s in enumerate(req["sets"]):
        if not isinstance(s, dict):
            raise bad(f"set {i} is not an object", i)
        sid = s.get("id") or ""
        if not isinstance(sid, str):
            raise bad(f"set {i}: id must be a string", i)
        rows = s.get("rows")
        if not isinstance(rows, list) or not rows:
            raise bad(f"set {i} has no rows", i, sid)
        parsed = []
        for j, r in enumerate(rows):
            if not isinstance(r, dict):
                raise bad(f"set {i} row {j} is not an object", i, sid)
            ctx = decode_tokens(r.get("context"), f"set {i} row {j} context")
            tgt = decode_tokens(r.get("target"), f"set {i} row {j} target")
            a, b = _range(r.get("span"), f"set {i} row {j} span")
            if a < 0 or b > len(tgt) or a >= b:
                raise bad(f"set {i} row {j}: span [{a}, {b}) is not a non-empty range inside the target "
                          f"of {len(tgt)} tokens", i, sid)
            if not ctx and a == 0:
                raise bad(f"set {i} row {j}: empty context and span starting at 0: the first scored token "
                          "needs a token before it", i, sid)
            k = _bad_token(ctx, V)
            if k >= 0:
                raise bad(f"set {i} row {j}: context token {ctx[k]} (index {k}) is outside the vocabulary "
                          f"[0, {V})", i, sid)
            k = _bad_token(tgt, V)
            if k >= 0:
                raise bad(f"set {i} row {j}: target token {tgt[k]} (index {k}) is outside the vocabulary "
                          f"[0, {V})", i, sid)
            if MC > 0 and len(tgt) > MC:
                raise bad(f"set {i} row {j}: target of {len(tgt)} tokens alone exceeds the model's max "
                          f"context {MC}", i, sid)
            temp = r.get("temperature")
            if temp is None:
                temp = 1.0
            elif isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp <= 0:
                raise bad(f"set {i} row {j}: temperature {temp!r} must be a finite number > 0 (leave it out "
                          "for 1)", i, sid)
            parsed.append((ctx, tgt, (a, b), float(temp)))
        out.append((sid, parsed))
    return out


def parse_attention_request(req, info, limits=None):
    """Decodes and validates an attention request (gpu/errors.go validateJobs); limits as
    in parse_score_request. Returns [(id, tokens, [((a0, a1), (o0, o1) or None)], layers)]."""
    if not isinstance(req, dict) or not isinstance(req.get("jobs"), list):
        raise bad('attention request must be an object with a "jobs" list')
    if limits:
        limits(len(req["jobs"]), sum(len(j["tokens"]) * 3 // 16 for j in req["jobs"]
                                     if isinstance(j, dict) and isinstance(j.get("tokens"), str)))
    V, MC, NL = info["vocab_size"], info["max_context"], info["layers"]
    out = []
    for i, jb in enumerate(req["jobs"]):
        if not isinstance(jb, dict):
            raise bad(f"job {i} is not an object", i)
        jid = jb.get("id") or ""
        if not isinstance(jid, str):
            raise bad(f"job {i}: id must be a string", i)
        toks = decode_tokens(jb.get("tokens"), f"job {i} tokens")
        n = len(toks)
        if n == 0:
            raise bad(f"job {i} has no tokens", i, jid)
        if MC > 0 and n > MC:
            raise bad(f"job {i} has {n} tokens, more than the model's max context {MC}", i, jid)
        k = _bad_token(toks, V)
        if k >= 0:
            raise bad(f"job {i}: token {toks[k]} (index {k}) is outside the vocabulary [0, {V})", i, jid)
        steps = jb.get("steps")
        if not isinstance(steps, list) or not steps:
            raise bad(f"job {i} has no steps", i, jid)
        end = 0
        parsed = []
        for k, stp in enumerate(steps):
            if not isinstance(stp, dict):
                raise bad(f"job {i} step {k} is not an object", i, jid)
            s, e = _range(stp.get("action"), f"job {i} step {k} action")
            if s < end or e < s or e > n:
                raise bad(f"job {i} step {k}: action range [{s}, {e}) must lie after the previous step "
                          f"({end}) and inside the {n} tokens, start <= end", i, jid)
            end = e
            obs = None
            if stp.get("observation") is not None:
                os_, oe = _range(stp["observation"], f"job {i} step {k} observation")
                if oe != os_:
                    if os_ < end or oe < os_ or oe > n:
                        raise bad(f"job {i} step {k}: observation range [{os_}, {oe}) must follow the action "
                                  f"({end}) and lie inside the {n} tokens", i, jid)
                    end = oe
                    obs = (os_, oe)
            parsed.append(((s, e), obs))
        layers = jb.get("layers")
        if not isinstance(layers, list) or not layers:
            raise bad(f"job {i} asks for no layers", i, jid)
        for l in layers:
            if not isinstance(l, int) or isinstance(l, bool) or not 0 <= l < NL:
                raise bad(f"job {i}: layer {l} is outside the model's layers [0, {NL})", i, jid)
        out.append((jid, toks, parsed, layers))
    return out


class Loaded:
    """A model and the policy version it serves; replaced as a whole on a hot load."""

    def __init__(self, model, policy_version, folder):
        self.model, self.policy_version, self.folder = model, policy_version, folder
        self.info = model.info()
        self.info["policy_version"] = policy_version


def read_policy_version(folder):
    """The integer in folder/policy_version, or None when the file is absent."""
    p = os.path.join(folder, POLICY_VERSION_FILE)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        raise ModelError(f"{p} must hold one integer (the policy version), got {text[:40]!r}") from None


class Pod:
    """The scorer pod: the current model, limits, metrics and the hot-load machinery."""

    def __init__(self, model_dir, device="cpu", dtype=torch.float32, token="", admin_token="",
                 policy_version=0, name=None, placeholder_ids=None, max_request_bytes=64 << 20,
                 max_rows=65536, max_tokens=4 << 20, max_concurrent=64, log=None, packing=None):
        self.device, self.dtype, self.packing = device, dtype, packing
        self.token, self.admin_token = token or "", admin_token or token or ""
        self.placeholder_ids = placeholder_ids
        self.max_request_bytes, self.max_rows, self.max_tokens = max_request_bytes, max_rows, max_tokens
        self.log = log or Logger()
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.max_concurrent = max_concurrent
        self.compute_lock = threading.Lock()
        self.load_lock = threading.Lock()
        self.draining = threading.Event()
        self.in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._idle = threading.Condition(self._in_flight_lock)
        self._init_metrics()
        self.name = name
        self.current = None
        self.load(model_dir, None, default_version=policy_version)

    def _init_metrics(self):
        r = self.registry = M.Registry()
        lat = M.exponential_buckets(0.0005, 2, 18)
        self.m_requests = M.Counter(r, "creditflow_scorer_server_requests_total",
                                    "Scorer protocol requests answered, by op and HTTP status.", ("op", "status"))
        self.m_duration = M.Histogram(r, "creditflow_scorer_server_request_duration_seconds",
                                      "Time to answer a scorer protocol request, by op.", ("op",), lat)
        self.m_in_flight = M.Gauge(r, "creditflow_scorer_server_in_flight_requests",
                                   "Score and attention requests being served.")
        self.m_items = M.Counter(r, "creditflow_scorer_server_items_total",
                                 "Row sets (score) and jobs (attention) served.", ("op",))
        self.m_tokens = M.Counter(r, "creditflow_scorer_server_tokens_total",
                                  "Tokens received in served requests, by op.", ("op",))
        self.m_forwarded = M.Counter(r, "creditflow_scorer_pod_tokens_forwarded_total",
                                     "Tokens forwarded through the model for LAPO rows (with prefix sharing).")
        self.m_row_by_row = M.Counter(r, "creditflow_scorer_pod_tokens_row_by_row_total",
                                      "Tokens a row-by-row computation without prefix sharing would have forwarded.")
        self.m_truncations = M.Counter(r, "creditflow_scorer_pod_truncations_total",
                                       "Rows whose context was cut from the left to fit the model's max context.")
        self.m_model_duration = M.Histogram(r, "creditflow_scorer_pod_model_duration_seconds",
                                            "Model time of a request (lock held), by op.", ("op",), lat)
        self.m_lock_wait = M.Histogram(r, "creditflow_scorer_pod_queue_wait_seconds",
                                       "Time a request waited for the model, by op.", ("op",), lat)
        self.m_policy = M.Gauge(r, "creditflow_scorer_pod_policy_version", "Policy version being served.")
        self.m_loads = M.Counter(r, "creditflow_scorer_pod_model_loads_total",
                                 "Model loads, by result (ok, error).", ("result",))
        self.m_load_seconds = M.Gauge(r, "creditflow_scorer_pod_model_load_duration_seconds",
                                      "Duration of the last successful model load.")
        self.m_device_bytes = M.Gauge(r, "creditflow_scorer_pod_device_memory_peak_bytes",
                                      "Peak accelerator memory allocated since start (0 on CPU).")

    # ----- loading ---------------------------------------------------------------------

    def load(self, folder, policy_version=None, default_version=None, name=None):
        """Loads folder and swaps it in. The policy version is, in order: the argument, the
        folder's policy_version file, default_version, the current version + 1."""
        with self.load_lock:
            start = time.monotonic()
            try:
                if policy_version is None:
                    policy_version = read_policy_version(folder)
                if policy_version is None:
                    policy_version = default_version
                if policy_version is None:
                    policy_version = self.current.policy_version + 1 if self.current else 0
                m = Model.load(folder, device=self.device, dtype=self.dtype,
                               placeholder_ids=self.placeholder_ids, name=name or self.name)
            except (ModelError, OSError) as e:
                self.m_loads.inc(1, "error")
                self.log.error("model load failed" + ("; the previous model keeps serving" if self.current else ""),
                               folder=folder, error=str(e))
                raise
            if self.packing:
                m.packing = self.packing
            if self.name is None:
                self.name = m.name  # the model's name stays fixed across policy versions
            m.name = name or self.name
            old = self.current
            if old is not None:
                oi = old.info
                if (m.cfg.vocab, m.cfg.layers) != (oi["vocab_size"], oi["layers"]):
                    self.log.warn("hot load changes the model's shape; clients will see a different model",
                                  folder=folder)
            self.current = Loaded(m, int(policy_version), os.path.abspath(folder))
            secs = time.monotonic() - start
            self.m_loads.inc(1, "ok")
            self.m_load_seconds.set(secs)
            self.m_policy.set(self.current.policy_version)
            self.log.info("model loaded", folder=folder, policy_version=self.current.policy_version,
                          architecture=m.cfg.architecture, layers=m.cfg.layers, device=str(self.device),
                          dtype=str(self.dtype).replace("torch.", ""), seconds=round(secs, 3))
            del old
            if torch.cuda.is_available() and str(self.device).startswith("cuda"):
                torch.cuda.empty_cache()
            return self.current

    def reload_from_disk(self, reason):
        """Reloads the current folder (SIGHUP, watcher); errors are logged, never raised."""
        cur = self.current
        try:
            self.load(cur.folder)
        except (ModelError, OSError):
            pass
        else:
            self.log.info("reloaded", reason=reason)

    def watch(self, interval, stop):
        """Polls the current folder's policy_version file; reloads when it changes."""
        def run():
            while not stop.wait(interval):
                cur = self.current
                try:
                    v = read_policy_version(cur.folder)
                except ModelError as e:
                    self.log.warn("ignoring policy_version file", error=str(e))
                    continue
                if v is not None and v != cur.policy_version:
                    self.reload_from_disk(f"policy_version file says {v}")
        t = threading.Thread(target=run, name="policy-watch", daemon=True)
        t.start()
        return t

    # ----- request helpers ---------------------------------------------------------------

    def authorized(self, header, admin=False):
        tok = self.admin_token if admin else self.token
        if not tok:
            return True
        if not header or len(header) < 7 or header[:7].lower() != "bearer ":
            return False
        return hmac.compare_digest(header[7:].strip().encode(), tok.encode())

    def enter(self):
        if not self._slots.acquire(blocking=False):
            return False
        with self._in_flight_lock:
            self.in_flight += 1
        self.m_in_flight.set(self.in_flight)
        return True

    def leave(self):
        with self._in_flight_lock:
            self.in_flight -= 1
            self._idle.notify_all()
        self.m_in_flight.set(self.in_flight)
        self._slots.release()

    def wait_idle(self, timeout):
        end = time.monotonic() + timeout
        with self._in_flight_lock:
            while self.in_flight > 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def run_model(self, op, fn):
        t0 = time.monotonic()
        with self.compute_lock:
            t1 = time.monotonic()
            try:
                return fn()
            finally:
                t2 = time.monotonic()
                self.m_lock_wait.observe(t1 - t0, op)
                self.m_model_duration.observe(t2 - t1, op)
                if str(self.device).startswith("cuda"):
                    self.m_device_bytes.set(torch.cuda.max_memory_allocated(self.device))

    def score(self, req):
        cur = self.current
        sets = parse_score_request(req, cur.info, self.check_limits)
        rows = [r for _, rs in sets for r in rs]
        self.m_items.inc(len(sets), "score")
        self.m_tokens.inc(sum(len(r[0]) + len(r[1]) for r in rows), "score")
        try:
            scores, usage = self.run_model("score", lambda: cur.model.score_rows(rows))
        except InputError as e:
            raise bad(str(e)) from None
        self.m_forwarded.inc(usage.tokens_forwarded)
        self.m_row_by_row.inc(usage.tokens_row_by_row)
        self.m_truncations.inc(usage.truncations)
        results, off = [], 0
        mc = cur.info["max_context"]
        for _, rs in sets:
            results.append({"scores": [_score(x) for x in scores[off:off + len(rs)]],
                            "truncations": sum(1 for r in rs if len(r[0]) + len(r[1]) > mc)})
            off += len(rs)
        return {"results": results, "usage": {"tokens_forwarded": usage.tokens_forwarded,
                                              "tokens_row_by_row": usage.tokens_row_by_row,
                                              "truncations": usage.truncations},
                "policy_version": cur.policy_version}

    def attention(self, req):
        cur = self.current
        jobs = parse_attention_request(req, cur.info, self.check_limits)
        self.m_items.inc(len(jobs), "attention")
        self.m_tokens.inc(sum(len(t) for _, t, _, _ in jobs), "attention")
        results = []
        for i, (jid, toks, steps, layers) in enumerate(jobs):
            try:
                gs = self.run_model("attention", lambda: cur.model.step_graphs(toks, steps, layers))
            except InputError as e:
                raise bad(f"job {i}: {e}", i, jid) from None
            results.append({"graphs": [{"layer": l, "aa": aa, "ao": ao} for l, aa, ao in gs]})
        return {"results": results, "policy_version": cur.policy_version}

    def check_limits(self, rows, tokens):
        if rows > self.max_rows:
            raise Reject(413, "too_large", f"request holds {rows} rows/jobs, over the scorer's limit of "
                                           f"{self.max_rows}; split it")
        if tokens > self.max_tokens:
            raise Reject(413, "too_large", f"request holds {tokens} tokens, over the scorer's limit of "
                                           f"{self.max_tokens}; split it")

    def info(self):
        cur = self.current
        out = dict(cur.info)
        out["protocol"] = PROTOCOL_VERSION
        out["device"] = str(self.device)
        out["dtype"] = str(self.dtype).replace("torch.", "")
        return out


class Logger:
    """JSON lines on stderr: {"level", "time", "message", ...fields}."""

    LEVELS = {"debug": 0, "info": 1, "warn": 2, "error": 3}

    def __init__(self, level="info", stream=None):
        self.level = self.LEVELS.get(level, 1)
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def _log(self, level, msg, **kw):
        if self.LEVELS[level] < self.level:
            return
        rec = {"level": level, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "message": msg}
        rec.update(kw)
        with self._lock:
            try:
                self.stream.write(json.dumps(rec, default=str) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a closed log stream must not fail requests

    def debug(self, msg, **kw):
        self._log("debug", msg, **kw)

    def info(self, msg, **kw):
        self._log("info", msg, **kw)

    def warn(self, msg, **kw):
        self._log("warn", msg, **kw)

    def error(self, msg, **kw):
        self._log("error", msg, **kw)


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
        if content_type == "application/json":
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
        entered = False
        items = 0
        try:
            self._guard("POST")
            if pod.draining.is_set():
                raise Reject(503, "overloaded", "scorer is shutting down; send the request to another endpoint")
            if not pod.enter():
                raise Reject(503, "overloaded", f"scorer is serving its limit of {pod.max_concurrent} concurrent "
                                                "requests; retry later or on another endpoint")
            entered = True
            body = self._read_body()
            try:
                req = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise bad(f"request body is not valid JSON for {op}: {e}") from None
            if isinstance(req, dict):
                lst = req.get("sets", req.get("jobs"))
                items = len(lst) if isinstance(lst, list) else 0
            resp = fn(req)
            self._send(200, resp)
            self._done(op, 200, start, items)
        except Reject as r:
            if not entered:
                self._discard_body()
            self._error(r, {"Allow": "POST"} if r.status == 405 else None)
            self._done(op, r.status, start, items, r.message)
        except Exception as e:  # noqa: BLE001 - every failure must become a protocol answer
            oom = type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e)
            if oom:
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                r = Reject(503, "overloaded", f"scorer ran out of accelerator memory ({e}); retry with fewer "
                                              "rows or tokens per request")
            else:
                r = Reject(500, "internal", f"{type(e).__name__}: {e}")
            self._error(r)
            self._done(op, r.status, start, items, r.message)
        finally:
            if entered:
                pod.leave()

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
