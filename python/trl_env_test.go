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

// trlPython returns the interpreter of a virtual environment layered on the project's
// (internal/pyenv): it sees the project environment's packages through a .pth file and
// adds python/requirements-trl.lock (TRL and the packages it adds), installed with
// --no-deps. It is built once per lock and project environment, next to the latter.
// Where it cannot be built the test fails under CI=true and skips elsewhere.
func trlPython(t *testing.T) string {
	t.Helper()
	base := pyenvtest.Python(t)
	lockPath := filepath.Join(repoRoot(t), "python", "requirements-trl.lock")
	lock, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(lock, base...))
	dir := filepath.Dir(filepath.Dir(base)) + "-trl-" + hex.EncodeToString(sum[:])[:12]
	py := filepath.Join(dir, "bin", "python")
	if err := buildTRLEnv(base, dir, lockPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("TRL environment %s: %v", dir, err)
		}
		t.Skipf("TRL environment %s could not be built here: %v", dir, err)
	}
	return py
}

func buildTRLEnv(base, dir, lockPath string) error {
	mark := filepath.Join(dir, ".creditflow-complete")
	if _, err := os.Stat(mark); err == nil {
		return nil
	}
	lk, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lk.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(mark); err == nil { // built while we waited
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	run := func(name string, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	purelib := "import sysconfig; print(sysconfig.get_paths()['purelib'])"
	baseLib, err := run(base, "-c", purelib)
	if err != nil {
		return err
	}
	if _, err := run(base, "-m", "venv", dir); err != nil {
		return err
	}
	py := filepath.Join(dir, "bin", "python")
	lib, err := run(py, "-c", purelib)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(lib, "creditflow-project-env.pth"), []byte(baseLib+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := run(py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps", "-r", lockPath); err != nil {
		return err
	}
	if _, err := run(py, "-c", "import trl.experimental.async_grpo, torch, transformers, confluent_kafka"); err != nil {
		return err
	}
	return os.WriteFile(mark, nil, 0o644)
}
