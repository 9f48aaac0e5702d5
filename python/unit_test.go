package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPythonPackage runs the package's own unit tests (python/tests) under pytest; it
// fails unless some ran and none failed (pytest's exit status 5, nothing collected, is a
// failure too).
func TestPythonPackage(t *testing.T) {
	py := projectPython(t)
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs")
	cmd.Dir = filepath.Join(repoRoot(t), "python")
	cmd.Env = append(pyEnv(t), "OMP_NUM_THREADS=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests failed: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`\d+ passed`).Match(out) {
		t.Fatalf("pytest passed nothing:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestPipInstallOffline: `pip install ./python` works without a network (no build
// isolation, no index) and the installed package carries its schemas.
func TestPipInstallOffline(t *testing.T) {
	py := projectPython(t)
	src := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot(t), "python"), src).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	target := filepath.Join(t.TempDir(), "site")
	cmd := exec.Command(py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "--target", target, src)
	cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	check := exec.Command(py, "-c", `import creditflow, sys
from creditflow import wire
assert creditflow.__file__.startswith(sys.argv[1]), creditflow.__file__
print(wire.codec("Sample").current.fingerprint.hex(), wire.codec("Sample").writers["aeddc48"].fingerprint.hex())`, target)
	check.Dir = t.TempDir()
	check.Env = append(os.Environ(), "PYTHONPATH="+target)
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "accbea26abfb68c4") {
		t.Fatalf("installed package lacks the v1 Sample schema: %s", out)
	}
}
