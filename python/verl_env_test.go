package python_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// verlPython returns the interpreter of a virtual environment of its own (not layered on
// the project's: verl 0.9.1 needs transformers < 5.11) holding exactly
// python/requirements-verl.lock, installed with --no-deps. The project environment's
// interpreter only creates it (the same Python 3.11). It is built once per lock and
// interpreter under the user cache directory (creditflow/verl-<hash>; about 5.8 GB).
// Where it cannot be built the test fails under CI=true and skips elsewhere.
func verlPython(t *testing.T) string {
	t.Helper()
	base := pyenvtest.Python(t)
	lockPath := filepath.Join(repoRoot(t), "python", "requirements-verl.lock")
	lock, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(lock, base...))
	dir := filepath.Join(cache, "creditflow", "verl-"+hex.EncodeToString(sum[:])[:12])
	start := time.Now()
	built, err := buildVerlEnv(base, dir, lockPath)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("verl environment %s: %v", dir, err)
		}
		t.Skipf("verl environment %s could not be built here: %v", dir, err)
	}
	if built {
		t.Logf("built the verl environment %s in %s", dir, time.Since(start).Round(time.Second))
	}
	return filepath.Join(dir, "bin", "python")
}

func buildVerlEnv(base, dir, lockPath string) (bool, error) {
	mark := filepath.Join(dir, ".creditflow-complete")
	if _, err := os.Stat(mark); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false, err
	}
	lk, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	defer syscall.Flock(int(lk.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(mark); err == nil { // built while we waited
		return false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	run := func(name string, args ...string) error {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	// `python -m venv` run by a virtual environment's interpreter makes one on its base Python
	if err := run(base, "-m", "venv", dir); err != nil {
		return false, err
	}
	py := filepath.Join(dir, "bin", "python")
	if err := run(py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps", "-r", lockPath); err != nil {
		return false, err
	}
	if err := run(py, "-c", "import verl.trainer.ppo.v1, transfer_queue, ray, torch, transformers, confluent_kafka, numpy"); err != nil {
		return false, err
	}
	return true, os.WriteFile(mark, nil, 0o644)
}
