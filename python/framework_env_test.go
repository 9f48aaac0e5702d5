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

// The trainer frameworks' virtual environments (TRL, verl), each built once per lock and
// interpreter from the package index with pip, --no-deps from an exact lock. Where one cannot
// be built its test fails under CI=true and skips elsewhere.

// trlPython returns the interpreter of a virtual environment layered on the project's
// (internal/pyenv): it sees the project environment's packages through a .pth file and
// adds python/requirements-trl.lock (TRL and the packages it adds). It lives next to the
// project environment.
func trlPython(t *testing.T) string {
	t.Helper()
	base := pyenvtest.Python(t)
	lockPath, hash := lockOf(t, "requirements-trl.lock", base)
	dir := filepath.Dir(filepath.Dir(base)) + "-trl-" + hash
	return frameworkPython(t, "TRL", dir, func(run runner) error {
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
		return installLock(run, py, lockPath, "import trl.experimental.async_grpo, torch, transformers, confluent_kafka")
	})
}

// verlPython returns the interpreter of a virtual environment of its own (not layered on
// the project's: verl 0.9.1 needs transformers < 5.11) holding exactly
// python/requirements-verl.lock. The project environment's interpreter only creates it (the
// same Python 3.11). It lives under the user cache directory (creditflow/verl-<hash>; about
// 5.8 GB).
func verlPython(t *testing.T) string {
	t.Helper()
	base := pyenvtest.Python(t)
	lockPath, hash := lockOf(t, "requirements-verl.lock", base)
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "creditflow", "verl-"+hash)
	return frameworkPython(t, "verl", dir, func(run runner) error {
		// `python -m venv` run by a virtual environment's interpreter makes one on its base Python
		if _, err := run(base, "-m", "venv", dir); err != nil {
			return err
		}
		return installLock(run, filepath.Join(dir, "bin", "python"), lockPath,
			"import verl.trainer.ppo.v1, transfer_queue, ray, torch, transformers, confluent_kafka, numpy")
	})
}

// runner runs a command and returns its trimmed output, or an error holding it.
type runner func(name string, args ...string) (string, error)

// lockOf returns the lock's path under python/ and a hash of the lock and the interpreter
// that builds from it.
func lockOf(t *testing.T, name, base string) (string, string) {
	t.Helper()
	path := filepath.Join(repoRoot(t), "python", name)
	lock, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(lock, base...))
	return path, hex.EncodeToString(sum[:])[:12]
}

// installLock installs the lock into the environment of py without dependencies and checks
// that check (Python) imports.
func installLock(run runner, py, lockPath, check string) error {
	if _, err := run(py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps", "-r", lockPath); err != nil {
		return err
	}
	_, err := run(py, "-c", check)
	return err
}

// frameworkPython builds the environment in dir with build unless a completed one is there
// (one builder at a time, under a file lock beside dir) and returns its interpreter.
func frameworkPython(t *testing.T, name, dir string, build func(runner) error) string {
	t.Helper()
	start := time.Now()
	built, err := buildEnvOnce(dir, build)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s environment %s: %v", name, dir, err)
		}
		t.Skipf("%s environment %s could not be built here: %v", name, dir, err)
	}
	if built {
		t.Logf("built the %s environment %s in %s", name, dir, time.Since(start).Round(time.Second))
	}
	return filepath.Join(dir, "bin", "python")
}

func buildEnvOnce(dir string, build func(runner) error) (bool, error) {
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
	run := func(name string, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if err := build(run); err != nil {
		return false, err
	}
	return true, os.WriteFile(mark, nil, 0o644)
}
