"""The pod's structured log."""

import json
import sys
import threading
import time


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
