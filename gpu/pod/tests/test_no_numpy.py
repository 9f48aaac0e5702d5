"""The pod and its tests run with torch and the standard library alone (no numpy)."""

import os
import subprocess
import sys
import unittest

from tests.util import ON_CPU

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@unittest.skipIf(os.environ.get("CFPOD_NO_NUMPY"), "already running without numpy")
@unittest.skipUnless(ON_CPU, "CPU-only: the same code runs on every device")
class NoNumpyTest(unittest.TestCase):
    def test_the_unit_tests_pass_without_numpy(self):
        # Every module that writes or reads checkpoints, serves, or decodes bodies; the
        # others (plans, bench counts, the check script, the TF32 simulation) run the same
        # torch code and are left to the outer run to keep the suite short. The whole suite
        # passes blocked too: python3 -c 'import tests.nonumpy as n; n.block(); n.main()'.
        env = dict(os.environ, CFPOD_NO_NUMPY="1")
        mods = ["tests.test_safetensors", "tests.test_model", "tests.test_server", "tests.test_reload",
                "tests.test_follow", "tests.test_binary", "tests.test_protocol", "tests.test_precision",
                "tests.test_attention"]
        p = subprocess.run([sys.executable, "-c", "import tests.nonumpy as n; n.block(); n.main()", *mods],
                           cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        self.assertIn("OK", p.stderr.strip().splitlines()[-1])

    def test_the_block_is_real(self):
        code = ("import tests.nonumpy as n; n.block(); import torch\n"
                "try:\n    import numpy\nexcept ModuleNotFoundError:\n    pass\nelse:\n    raise SystemExit(1)\n"
                "try:\n    torch.zeros(1).numpy()\nexcept RuntimeError:\n    pass\nelse:\n    raise SystemExit(2)\n")
        p = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
