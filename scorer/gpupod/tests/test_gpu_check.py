"""gpu_check.sh, run here as a dry run on CPU (--cpu): TF32 switched off and reported, one
file per step, the verdict line."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.util import ON_CPU

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(HERE, "gpu_check.sh")


@unittest.skipIf(os.environ.get("CFPOD_IN_GPU_CHECK"), "inside a check run")
@unittest.skipUnless(ON_CPU and shutil.which("bash") and shutil.which("timeout"), "a CPU run with bash and timeout")
class GpuCheckScriptTest(unittest.TestCase):
    def run_check(self, *args, **env):
        out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, out)
        e = dict(os.environ, PYTHON=sys.executable, **env)
        p = subprocess.run(["bash", SCRIPT, "--cpu", *args, out], env=e, capture_output=True, text=True, timeout=900)
        return p, out

    def test_tf32_overrides_are_switched_off_and_reported(self):
        p, out = self.run_check("--steps", "env", TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1", NVIDIA_TF32_OVERRIDE="1")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("tf32: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE was 1; set to 0", p.stdout)
        self.assertIn("tf32: NVIDIA_TF32_OVERRIDE was 1; set to 0", p.stdout)
        with open(os.path.join(out, "env.txt")) as f:
            env = f.read()
        # What the python steps see: the overrides off, nothing forcing TF32.
        self.assertIn("tf32 TORCH_ALLOW_TF32_CUBLAS_OVERRIDE: 0\n", env)
        self.assertIn("tf32 NVIDIA_TF32_OVERRIDE: 0\n", env)
        self.assertIn("tf32 forced: False\n", env)
        for key in ("torch: ", "cuda: ", "cudnn: ", "sdpa: ", "kernels cached prefix"):
            self.assertIn(key, env)
        self.assertEqual(p.stdout.strip().splitlines()[-1][:26], "gpu_check verdict: PASS (c")

    def test_dry_run_of_every_step(self):
        p, out = self.run_check()
        self.assertEqual(p.returncode, 0, p.stdout[-6000:] + p.stderr[-2000:])
        self.assertTrue(p.stdout.strip().splitlines()[-1].startswith("gpu_check verdict: PASS (cpu"))
        with open(os.path.join(out, "steps.txt")) as f:
            steps = [l.split()[0] for l in f if not l.startswith("tf32")]
        self.assertEqual(steps, ["env", "tests", "check", "bench-0.5b", "bench-7b"])
        for name in steps:
            self.assertTrue(os.path.getsize(os.path.join(out, name + ".txt")) > 0, name)
        with open(os.path.join(out, "check.txt")) as f:
            check = f.read()
        self.assertIn("check: PASS", check)
        self.assertEqual(check.count("attention: "), 3)
        for b in ("bench-0.5b", "bench-7b"):
            with open(os.path.join(out, b + ".json")) as f:
                res = json.load(f)
            for k in ("lapo_walk", "lapo_tree", "lapo_padded", "lapo_row_by_row", "attention", "counts"):
                self.assertIn(k, res, b)

    def test_spent_budget_fails_the_verdict(self):
        p, out = self.run_check("--steps", "env,check", CFPOD_CHECK_BUDGET="24")
        self.assertEqual(p.returncode, 1)
        self.assertIn("env SKIPPED", p.stdout)
        self.assertTrue(p.stdout.strip().splitlines()[-1].startswith("gpu_check verdict: FAIL (cpu; env skipped,check skipped"))


if __name__ == "__main__":
    unittest.main()
