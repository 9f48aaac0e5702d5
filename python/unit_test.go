package python_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonPackage runs the package's own unit tests (python/tests) with unittest.
func TestPythonPackage(t *testing.T) {
	py := pythonWith(t, "numpy")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	cmd.Dir = filepath.Join(repoRoot(t), "python")
	cmd.Env = pyEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
