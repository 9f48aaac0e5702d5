"""The model's health: liveness from the model itself, readiness, and the pod's exit on an
unrecoverable accelerator error (scorer/gpupod/README.md, "Health").

- Every model call (a request's, or the canary's) goes through Health.model_call: it records
  when the call started, and when the last call succeeded.
- GET /livez (Health.live) answers 200 while a model call succeeded within the liveness
  interval, or one is running for less than the stall timeout; otherwise it runs a canary
  (one row of one token through the model) and answers from it, waiting at most the canary
  timeout. 503 when the canary fails or does not finish, when a call has run past the stall
  timeout, or after an unrecoverable accelerator error.
- GET /healthz (readiness, Health.unready) fails on the same conditions without running the
  model: after a failed canary until a model call succeeds again, while a call is stalled,
  and after an unrecoverable error.
- An unrecoverable accelerator error ("sticky": CUDA keeps failing every later call of the
  process after a device-side assert, an illegal memory access, an uncorrectable ECC error,
  an unspecified launch failure ...) marks the pod broken and calls on_fatal once; the
  server (__main__) then exits with EXIT_ACCELERATOR so that Kubernetes restarts the pod.

Test hook: with the environment variable CFPOD_TEST_FAULT_FILE naming a file, every model
call while that file exists raises RuntimeError with the file's text (default: a CUDA
device-side assert message). It exists so that the CPU tests can exercise the sticky-error
path; the real trigger only happens on an accelerator.
"""

import os
import threading
import time

PATH_LIVE = "/livez"

# Exit status of the pod after an unrecoverable accelerator error.
EXIT_ACCELERATOR = 3

# Messages of CUDA errors after which every later call of the process fails (the CUDA
# context is corrupted; only a new process recovers). Out-of-memory is not one of them.
STICKY_MARKERS = (
    "device-side assert",
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "ecc error",
    "uncorrectable ecc",
    "launch timed out",
    "hardware stack error",
    "cuda error: unknown error",
    "cublas_status_execution_failed",
    "cudnn_status_execution_failed",
)

FAULT_ENV = "CFPOD_TEST_FAULT_FILE"
DEFAULT_FAULT = ("CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
                 "reported at some other API call (injected by " + FAULT_ENV + ")")


def sticky_accelerator_error(e):
    """e is an accelerator error after which the process cannot compute any more."""
    m = str(e).lower()
    return any(k in m for k in STICKY_MARKERS)


class Health:
    """The model's health (see the module doc). interval: seconds a successful model call
    counts as proof of life; canary_timeout: the longest /livez waits for its canary;
    stall: the longest a model call may run before liveness fails."""

    def __init__(self, log, interval=10.0, canary_timeout=10.0, stall=300.0):
        self.log = log
        self.interval, self.canary_timeout, self.stall = interval, canary_timeout, stall
        self.last_ok = time.monotonic()  # the model was just loaded (and its canary passed)
        self.busy_since = None  # start of the model call in progress
        self.failed = ""  # the last canary's failure, until a model call succeeds
        self.broken = ""  # the unrecoverable error, for good
        self.on_fatal = None  # called once (with the message) after an unrecoverable error
        self._lock = threading.Lock()
        self._canary = None  # (done event, result list) of the canary in progress
        self.fault_file = os.environ.get(FAULT_ENV) or None

    # ----- model calls -----------------------------------------------------------------

    def inject(self):
        """The test hook (module doc): raises while the fault file exists."""
        if self.fault_file and os.path.exists(self.fault_file):
            try:
                with open(self.fault_file, encoding="utf-8") as f:
                    text = f.read().strip()
            except OSError:
                text = ""
            raise RuntimeError(text or DEFAULT_FAULT)

    def model_call(self, fn):
        """fn() as one model call: timed for liveness; an unrecoverable accelerator error is
        fatal (and raised on)."""
        self.busy_since = time.monotonic()
        try:
            self.inject()
            out = fn()
        except BaseException as e:
            self.check(e)
            raise
        finally:
            self.busy_since = None
        self.last_ok = time.monotonic()
        self.failed = ""
        return out

    def check(self, e):
        """Marks the pod broken when e is an unrecoverable accelerator error."""
        if sticky_accelerator_error(e):
            self.fatal(f"{type(e).__name__}: {e}")

    def fatal(self, message):
        with self._lock:
            if self.broken:
                return
            self.broken = message
        self.log.error("unrecoverable accelerator error: every later model call would fail; the scorer exits "
                       "so that it is restarted", error=message, exit_status=EXIT_ACCELERATOR)
        if self.on_fatal is not None:
            self.on_fatal(message)

    # ----- probes ----------------------------------------------------------------------

    def unready(self):
        """Why the model cannot serve now ("" when it can), without running it."""
        if self.broken:
            return f"unrecoverable accelerator error: {self.broken}"
        b = self.busy_since
        if b is not None and time.monotonic() - b > self.stall:
            return f"a model call has run for {time.monotonic() - b:.0f} s, over the stall timeout of {self.stall:g} s"
        if self.failed:
            return f"the model's canary failed: {self.failed}"
        return ""

    def live(self, canary):
        """(ok, body) of GET /livez; canary() runs the canary forward under the model lock,
        returning False when the model is busy (another call is in progress)."""
        why = self.unready()
        if self.broken or why.startswith("a model call"):
            return False, {"status": "failed", "error": why}
        if self._canary is not None:  # a canary is running: its result is the answer
            return self._run_canary(canary)
        now = time.monotonic()
        b = self.busy_since
        if b is not None:
            return True, {"status": "ok", "model": "busy", "call_seconds": round(now - b, 3)}
        if now - self.last_ok <= self.interval:
            return True, {"status": "ok", "model": "ok", "last_success_seconds": round(now - self.last_ok, 3)}
        return self._run_canary(canary)

    def _run_canary(self, canary):
        with self._lock:
            job = self._canary
            if job is None:
                job = self._canary = (threading.Event(), [])
                threading.Thread(target=self._canary_thread, args=(canary, job), name="cfpod-canary",
                                 daemon=True).start()
        done, result = job
        if not done.wait(self.canary_timeout):
            return False, {"status": "failed",
                           "error": f"the model's canary did not finish within {self.canary_timeout:g} s"}
        ok, why = result[0]
        if ok:
            return True, {"status": "ok", "model": why, "last_success_seconds": round(time.monotonic() - self.last_ok, 3)}
        return False, {"status": "failed", "error": f"the model's canary failed: {why}"}

    def _canary_thread(self, canary, job):
        done, result = job
        try:
            ran = canary()
            result.append((True, "canary" if ran else "busy"))
        except Exception as e:  # noqa: BLE001 - a failed canary is the answer
            msg = f"{type(e).__name__}: {e}"
            self.failed = msg
            self.log.error("the model's canary failed", error=msg)
            result.append((False, msg))
        finally:
            with self._lock:
                self._canary = None
            done.set()
