"""The pod's state: the model it serves with its policy version, the limits, the metrics,
the hot-load machinery (admin load, SIGHUP, the policy_version file), and the
one-at-a-time model lock every request's model work goes through."""

import hmac
import os
import random
import threading
import time

import torch

from . import metrics as M
from .health import Health
from .log import Logger
from .model import InputError, Model, ModelError, inference
from .protocol import (PROTOCOL_VERSION, Reject, _score, bad, parse_attention_request,
                       parse_score_request, FEATURES)

POLICY_VERSION_FILE = "policy_version"


def out_of_memory(e):
    """e reports an allocation that failed (CUDA, or the CPU allocator)."""
    m = str(e)
    return (type(e).__name__ == "OutOfMemoryError" or "out of memory" in m.lower()
            or "can't allocate memory" in m)


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


# Each wait of the policy_version watcher is interval times a uniform draw from
# [WATCH_JITTER_LOW, WATCH_JITTER_HIGH]: on average one poll per interval, at most 1.5
# intervals between a write and its reload. Fresh draws every wait, rather than one random
# first offset, keep pods apart for good: pods that a rollout started together, or whose
# reloads waited on the same volume and ended together, drift apart again at the next waits.
WATCH_JITTER_LOW, WATCH_JITTER_HIGH = 0.5, 1.5


def watch_wait(interval, rng):
    """Seconds until the watcher's next poll (see WATCH_JITTER_LOW)."""
    return interval * rng.uniform(WATCH_JITTER_LOW, WATCH_JITTER_HIGH)


class Pod:
    """The scorer pod: the current model, limits, metrics and the hot-load machinery."""

    def __init__(self, model_dir, device="cpu", dtype=torch.float32, token="", admin_token="",
                 policy_version=0, name=None, placeholder_ids=None, max_request_bytes=64 << 20,
                 max_rows=65536, max_tokens=4 << 20, max_concurrent=64, log=None, packing=None,
                 max_context=None, health=None, attention=None):
        self.device, self.dtype, self.packing, self.attention_kind = device, dtype, packing, attention
        self.max_context = max_context
        # No admin token: the admin endpoint is disabled (never the scoring token's).
        self.token, self.admin_token = token or "", admin_token or ""
        self.placeholder_ids = placeholder_ids
        self.max_request_bytes, self.max_rows, self.max_tokens = max_request_bytes, max_rows, max_tokens
        self.log = log or Logger()
        self.health = health or Health(self.log)
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.max_concurrent = max_concurrent
        self.compute_lock = threading.Lock()
        self.load_lock = threading.Lock()
        self.draining = threading.Event()
        self.in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._idle = threading.Condition(self._in_flight_lock)
        self._init_metrics()
        self.fit_tokens = {"score": 0, "attention": 0}  # the largest request of each op that has fit
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
        self.m_oom = M.Counter(r, "creditflow_scorer_pod_out_of_memory_total",
                               "Requests that ran out of accelerator memory (answered 413 out_of_memory), by op.",
                               ("op",))
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
                               placeholder_ids=self.placeholder_ids, name=name or self.name,
                               max_context=self.max_context)
                # A model that cannot run a forward is not swapped in (cfpod/health.py).
                self.health.inject()
                self.forward_canary(m)
            except Exception as e:  # noqa: BLE001 - any failure (a bad file, CUDA out of memory) keeps the old model
                self.health.check(e)
                self.m_loads.inc(1, "error")
                if str(self.device).startswith("cuda"):
                    torch.cuda.empty_cache()  # the half-built copy's memory
                self.log.error("model load failed" + ("; the previous model keeps serving" if self.current else ""),
                               folder=folder, error=f"{type(e).__name__}: {e}")
                raise
            if self.packing:
                m.packing = self.packing
            if self.attention_kind:
                m.set_attention(self.attention_kind)
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
        """Reloads the current folder (SIGHUP, watcher); any failure is counted and logged by
        load (the old model keeps serving), never raised."""
        cur = self.current
        try:
            self.load(cur.folder)
        except Exception:  # noqa: BLE001 - load counted and logged it
            return False
        self.log.info("reloaded", reason=reason)
        return True

    def watch(self, interval, stop, rng=None):
        """Polls the current folder's policy_version file; reloads when it changes. A failed
        reload keeps the old model and is tried again at the next poll; nothing stops the
        watcher but stop. Each wait is drawn anew (watch_wait), so that pods started together
        (and pods whose reloads queued on the same volume) do not poll and reload in step."""
        rng = rng or random.Random()  # seeded from the OS: every pod draws its own waits

        def run():
            while not stop.wait(watch_wait(interval, rng)):
                try:
                    cur = self.current
                    try:
                        v = read_policy_version(cur.folder)
                    except (ModelError, OSError) as e:
                        self.log.warn("ignoring policy_version file", error=str(e))
                        continue
                    if v is not None and v != cur.policy_version:
                        self.reload_from_disk(f"policy_version file says {v}")
                except Exception as e:  # noqa: BLE001 - the watcher must outlive any failure
                    self.log.error("policy_version watcher failed; watching on", error=f"{type(e).__name__}: {e}")
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
        """Takes one of max_concurrent slots without waiting (False when none is free) and
        counts the request in flight. The handler calls free_slot once its answer is ready
        and leave once the answer is written."""
        if not self._slots.acquire(blocking=False):
            return False
        with self._in_flight_lock:
            self.in_flight += 1
        self.m_in_flight.set(self.in_flight)
        return True

    def free_slot(self):
        """Frees the slot before the answer is written, so a client holding its answer can
        count on the slot being free for its next request. The request stays in flight
        (wait_idle still waits for it) until leave."""
        self._slots.release()

    def leave(self):
        with self._in_flight_lock:
            self.in_flight -= 1
            self._idle.notify_all()
        self.m_in_flight.set(self.in_flight)

    def wait_idle(self, timeout):
        end = time.monotonic() + timeout
        with self._in_flight_lock:
            while self.in_flight > 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def run_model(self, op, fn, tokens=0):
        """fn() under the model lock. Running out of accelerator memory is a 413
        out_of_memory naming the largest request of op that has fit (the client splits the
        request; a single set or job that does not fit is dead-lettered with the message)."""
        t0 = time.monotonic()
        with self.compute_lock:
            t1 = time.monotonic()
            try:
                with inference():
                    out = self.health.model_call(fn)
                if tokens > self.fit_tokens[op]:
                    self.fit_tokens[op] = tokens
                return out
            except Exception as e:  # noqa: BLE001 - only out-of-memory errors are turned into a 413
                if not out_of_memory(e):
                    raise
                if str(self.device).startswith("cuda"):
                    torch.cuda.empty_cache()
                self.m_oom.inc(1, op)
                fit = self.fit_tokens[op]
                what = "scores" if op == "score" else "attention jobs"
                raise Reject(413, "out_of_memory",
                             f"scorer ran out of accelerator memory on a request of {tokens} tokens ({e}); "
                             + (f"{what} requests of up to {fit} tokens have fit on this scorer: send fewer tokens "
                                "per request (the client's token budget)" if fit else
                                f"no {what} request has fit since the scorer started")) from None
            finally:
                t2 = time.monotonic()
                self.m_lock_wait.observe(t1 - t0, op)
                self.m_model_duration.observe(t2 - t1, op)
                if str(self.device).startswith("cuda"):
                    self.m_device_bytes.set(torch.cuda.max_memory_allocated(self.device))

    @staticmethod
    def forward_canary(model):
        """The smallest forward: one row of one context and one target token."""
        with inference():
            model.score_rows([([0], [0], (0, 1))])

    def canary(self):
        """The canary forward on the current model under the model lock, as one model call
        (health.py); False without running it when the model is busy with a request."""
        if not self.compute_lock.acquire(blocking=False):
            return False
        try:
            cur = self.current
            self.health.model_call(lambda: self.forward_canary(cur.model))
            return True
        finally:
            self.compute_lock.release()

    def score(self, req):
        """Logprob sets go through one prefix-shared plan; each entropy or kl set is scored
        on its own, row by row (Model.score_rows_statistic)."""
        cur = self.current
        sets = parse_score_request(req, cur.info, self.check_limits, statistics=True)
        all_rows = [r for _, rs, _ in sets for r in rs]
        rows = [r for _, rs, st in sets if st == "logprob" for r in rs]
        self.m_items.inc(len(sets), "score")
        # as check_limits counts
        self.m_tokens.inc(sum(len(r[0]) + len(r[1]) + (len(r[4]) if len(r) > 4 else 0) for r in all_rows), "score")
        try:  # validation and the plan (radix tree, calls, indices) outside the model lock
            planned = cur.model.plan_rows(rows)
        except InputError as e:
            raise bad(str(e)) from None
        tokens = sum(len(r[0]) + len(r[1]) for r in rows)
        scores, usage = self.run_model("score", lambda: cur.model.score_plan(planned), tokens) if rows else ([], planned[1])
        results, off = [], 0
        mc = cur.info["max_context"]
        for i, (sid, rs, stat) in enumerate(sets):
            if stat == "logprob":
                results.append({"scores": [_score(x) for x in scores[off:off + len(rs)]],
                                "truncations": sum(1 for r in rs if len(r[0]) + len(r[1]) > mc)})
                off += len(rs)
                continue
            try:
                sc, u = self.run_model("score", lambda: cur.model.score_rows_statistic(rs, stat),
                                       sum(len(r[0]) + len(r[1]) for r in rs))
            except InputError as e:
                raise bad(f"set {i}: {e}", i, sid) from None
            usage.tokens_forwarded += u.tokens_forwarded
            usage.tokens_row_by_row += u.tokens_row_by_row
            usage.truncations += u.truncations
            results.append({"scores": [_score(x) for x in sc], "truncations": u.truncations})
        self.m_forwarded.inc(usage.tokens_forwarded)
        self.m_row_by_row.inc(usage.tokens_row_by_row)
        self.m_truncations.inc(usage.truncations)
        return {"results": results, "usage": {"tokens_forwarded": usage.tokens_forwarded,
                                              "tokens_row_by_row": usage.tokens_row_by_row,
                                              "truncations": usage.truncations,
                                              "packs": usage.packs, "max_pack_tokens": usage.max_pack_tokens},
                "policy_version": cur.policy_version}

    def attention(self, req):
        cur = self.current
        jobs = parse_attention_request(req, cur.info, self.check_limits)
        self.m_items.inc(len(jobs), "attention")
        self.m_tokens.inc(sum(len(t) for _, t, _, _ in jobs), "attention")
        results = []
        for i, (jid, toks, steps, layers) in enumerate(jobs):
            try:
                gs = self.run_model("attention", lambda: cur.model.step_graphs(toks, steps, layers), len(toks))
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
        out["features"] = list(FEATURES)
        out["device"] = str(self.device)
        out["dtype"] = str(self.dtype).replace("torch.", "")
        return out
