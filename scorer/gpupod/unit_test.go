package pod_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestPodPythonUnitTests runs the pod's own tests (scorer/gpupod/tests) under pytest on CPU
// torch, so `go test ./...` covers them; gpu_check.sh runs the same tests on an
// accelerator. python/ is on PYTHONPATH for the policy follower's tests (the creditflow
// package); torch uses two threads.
func TestPodPythonUnitTests(t *testing.T) {
	py := findPython(t)
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	runPytest(t, py, ".", "PYTHONPATH="+filepath.Join(root, "python"))
}

// runPytest runs pytest in dir with the extra environment and fails unless every
// collected test passed or skipped and at least one ran (pytest's exit status 5, no
// tests collected, is a failure too).
func runPytest(t *testing.T, py, dir string, env ...string) string {
	t.Helper()
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), append([]string{"CFPOD_TEST_DEVICE=cpu", "PYTHONDONTWRITEBYTECODE=1",
		"OMP_NUM_THREADS=2", "MKL_NUM_THREADS=2"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest in %s: %v\n%s", dir, err, out)
	}
	if !regexp.MustCompile(`\d+ passed`).Match(out) {
		t.Fatalf("pytest in %s passed nothing:\n%s", dir, out)
	}
	t.Logf("%s", lastLines(out, 15))
	return string(out)
}

func lastLines(b []byte, n int) string {
	lines := regexp.MustCompile("\n").Split(string(b), -1)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
