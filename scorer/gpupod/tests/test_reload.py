"""Hot-load failures of any kind (a bad checkpoint, CUDA out of memory while the new copy is
built) keep the old model serving, are counted and logged, and the watcher lives on."""

import io
import json
import os
import shutil
import tempfile
import threading
import time
import unittest

from cfpod import pod as podmod
from cfpod.server import Logger, Pod
from tests.util import DEVICE, small_config, write_checkpoint


class ReloadFailureTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.folder = os.path.join(self.dir, "m")
        write_checkpoint(self.folder, small_config(), seed=1, placeholder=96)
        self.set_version(3)
        self.log = io.StringIO()
        self.pod = Pod(self.folder, device=DEVICE, log=Logger("info", self.log))
        self.row = [([1, 2, 3], [4, 5], (0, 2))]
        self.before = self.pod.current.model.score_rows(self.row)[0]

    def set_version(self, v):
        with open(os.path.join(self.folder, "policy_version"), "w") as f:
            f.write(f"{v}\n")

    def wait(self, cond, what):
        deadline = time.time() + 30
        while not cond():
            if time.time() > deadline:
                self.fail(f"gave up waiting for {what}; log:\n{self.log.getvalue()}")
            time.sleep(0.02)

    def test_watched_reload_survives_out_of_memory(self):
        real = podmod.Model.load
        calls = []
        retry = threading.Event()  # the retried load waits until the old model was checked
        self.addCleanup(retry.set)

        def failing(*a, **k):  # CUDA running out of memory while the new copy is built
            calls.append(a)
            if len(calls) == 1:
                raise RuntimeError("CUDA out of memory. Tried to allocate 14.00 GiB")
            retry.wait(30)
            return real(*a, **k)
        podmod.Model.load = failing
        self.addCleanup(setattr, podmod.Model, "load", real)
        stop = threading.Event()
        self.addCleanup(stop.set)
        t = self.pod.watch(0.02, stop)
        self.set_version(4)
        self.wait(lambda: self.pod.m_loads.value("error") >= 1, "the failed load to be counted")
        self.assertEqual(self.pod.current.policy_version, 3)  # the old model serves
        self.assertEqual(self.pod.current.model.score_rows(self.row)[0], self.before)
        self.assertTrue(t.is_alive(), "the watcher died with the failed load")
        lines = [json.loads(l) for l in self.log.getvalue().splitlines()]
        self.assertTrue(any(l.get("message", "").startswith("model load failed") and "out of memory" in l.get("error", "")
                            for l in lines), self.log.getvalue())
        # The next poll tries again (the file still says 4) and succeeds.
        retry.set()
        self.wait(lambda: self.pod.current.policy_version == 4, "the retried reload")
        self.assertEqual(self.pod.m_loads.value("ok"), 2)
        self.assertTrue(t.is_alive())

    def test_any_failure_keeps_the_old_model_and_is_counted(self):
        for exc in (RuntimeError("CUDA error: an illegal memory access"), MemoryError(), KeyError("x")):
            with self.subTest(exc=type(exc).__name__):
                real = podmod.Model.load

                def failing(*a, **k):
                    raise exc
                podmod.Model.load = failing
                try:
                    errors = self.pod.m_loads.value("error")
                    self.assertFalse(self.pod.reload_from_disk("SIGHUP"))
                    with self.assertRaises(type(exc)):
                        self.pod.load(self.folder, 9)
                finally:
                    podmod.Model.load = real
                self.assertEqual(self.pod.m_loads.value("error"), errors + 2)
                self.assertEqual(self.pod.current.policy_version, 3)


if __name__ == "__main__":
    unittest.main()


class _Waits(threading.Event):
    """A stop event that records the watcher's waits and stops it after n of them."""

    def __init__(self, n):
        super().__init__()
        self.n, self.waits = n, []
        self.done = threading.Event()

    def wait(self, timeout=None):
        if self.is_set():
            return True
        self.waits.append(timeout)
        if len(self.waits) >= self.n:
            self.set()
            self.done.set()
            return True
        return False


class WatchSpreadTest(unittest.TestCase):
    """Pods started together must not poll the shared volume (and reload) in step: every wait
    of the policy_version watcher is drawn from [0.5, 1.5] x the interval, independently per
    pod."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        folder = os.path.join(self.dir, "m")
        write_checkpoint(folder, small_config(), seed=1, placeholder=96)
        self.pods = [Pod(folder, device=DEVICE, log=Logger("info", io.StringIO())) for _ in range(2)]

    def waits(self, pod, interval=30.0, n=300):
        stop = _Waits(n)
        t = pod.watch(interval, stop)
        self.assertTrue(stop.done.wait(30), "the watcher did not poll")
        t.join(5)
        return [w / interval for w in stop.waits]

    def test_waits_are_spread(self):
        a, b = (self.waits(p) for p in self.pods)
        for w in (a, b):
            self.assertTrue(all(0.5 <= x <= 1.5 for x in w), f"a wait outside [0.5, 1.5] intervals: {min(w)}..{max(w)}")
            self.assertLess(min(w), 0.7)  # 300 draws: each bound missed with probability 0.8**300
            self.assertGreater(max(w), 1.3)
            self.assertAlmostEqual(sum(w) / len(w), 1.0, delta=0.1)  # one poll per interval on average
        # Two pods started together: their polls drift apart at once.
        self.assertNotEqual(a[:5], b[:5])
        ta = [sum(a[:i + 1]) for i in range(len(a))]
        tb = [sum(b[:i + 1]) for i in range(len(b))]
        self.assertGreater(max(abs(x - y) for x, y in zip(ta, tb)), 0.5)
