package pod_test

import (
	"os/exec"
	"testing"
)

// TestPodPythonUnitTests runs the pod's own unit tests (gpu/pod/tests) on CPU torch, so
// `go test ./...` covers them; gpu_check.sh runs the same tests on an accelerator.
func TestPodPythonUnitTests(t *testing.T) {
	py := findPython(t)
	cmd := exec.Command(py, "-m", "unittest")
	cmd.Dir = "." // gpu/pod
	cmd.Env = append(cmd.Environ(), "CFPOD_TEST_DEVICE=cpu", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pod unit tests failed: %v\n%s", err, out)
	}
}
