// Package pyenv finds or builds the project's one Python environment: a virtual
// environment holding exactly the packages pinned in python/requirements.lock
// (PyTorch 2, transformers, safetensors, tokenizers, numpy, confluent-kafka,
// fastavro, avro, pytest), installed from the Python package index.
//
// Guarantees:
//   - The environment is named by the hash of the lock file, so a changed lock
//     builds a new environment and never mutates one in use; one that is complete
//     is marked so, and a half-built one (an install that failed or was killed) is
//     removed and built again.
//   - Builds are serialized across processes with a file lock: many test
//     packages asking at once build it once.
//   - It lives under $CREDITFLOW_VENV when set (used as is, built there if
//     missing), else under the user's cache directory
//     (~/.cache/creditflow/venv-<hash>), shared by every checkout.
//
// The project's own Python code (python/creditflow, the scorer pod) is not
// installed into it: callers put the checkout's folders on PYTHONPATH, or install
// them with pip into an environment of their own.
package pyenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/creditflow/creditflow/python"
)

// EnvVar overrides where the environment lives.
const EnvVar = "CREDITFLOW_VENV"

// BaseEnvVar names the interpreter the environment is made from (default: the
// first python3 on PATH, then /usr/bin/python3, that is 3.11 or newer).
const BaseEnvVar = "CREDITFLOW_BASE_PYTHON"

const completeMark = ".creditflow-complete"

// Hash is the first 12 hex digits of the lock file's SHA-256.
func Hash() string {
	sum := sha256.Sum256(python.Lock)
	return hex.EncodeToString(sum[:])[:12]
}

// Dir is where the environment lives (built or not).
func Dir() string {
	if d := os.Getenv(EnvVar); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil || cache == "" {
		cache = filepath.Join(os.TempDir(), "creditflow-cache")
	}
	return filepath.Join(cache, "creditflow", "venv-"+Hash())
}

// Interpreter is the environment's python, whether or not it exists.
func Interpreter() string { return filepath.Join(Dir(), "bin", "python") }

// Ready reports whether the environment is complete.
func Ready() bool {
	_, err := os.Stat(filepath.Join(Dir(), completeMark))
	return err == nil
}

// Python returns the environment's interpreter if it is built, and an error that
// says how to build it otherwise.
func Python() (string, error) {
	if Ready() {
		return Interpreter(), nil
	}
	return "", fmt.Errorf("the project's Python environment is not built at %s: run `creditflow pyenv` (or `go run ./cmd/creditflow pyenv`) once; it installs python/requirements.lock from the Python package index", Dir())
}

// Ensure returns the environment's interpreter, building the environment first
// when it is missing (a few minutes and about 6 GB: PyTorch's wheels bring their
// CUDA libraries). Progress goes to log.
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	if Ready() {
		return Interpreter(), nil
	}
	dir := Dir()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("python environment: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("python environment: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("python environment: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if Ready() { // built by another process while this one waited
		return Interpreter(), nil
	}
	if err := build(ctx, dir, log); err != nil {
		return "", err
	}
	return Interpreter(), nil
}

func build(ctx context.Context, dir string, log io.Writer) error {
	base, err := baseInterpreter()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil { // a half-built one
		return fmt.Errorf("python environment: remove the incomplete %s: %w", dir, err)
	}
	fmt.Fprintf(log, "creditflow: building the Python environment %s from python/requirements.lock with %s (a few minutes, once)\n", dir, base)
	lockFile := dir + ".requirements.lock"
	if err := os.WriteFile(lockFile, python.Lock, 0o644); err != nil {
		return fmt.Errorf("python environment: %w", err)
	}
	defer os.Remove(lockFile)
	steps := [][]string{
		{base, "-m", "venv", dir},
		{filepath.Join(dir, "bin", "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "-r", lockFile},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = append(os.Environ(), "PIP_NO_INPUT=1")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("python environment: %s: %w (the environment needs the Python package index; see python/requirements.lock)", strings.Join(s, " "), err)
		}
	}
	check := exec.CommandContext(ctx, filepath.Join(dir, "bin", "python"), "-c", "import torch, transformers, safetensors, tokenizers, numpy, confluent_kafka, fastavro, avro, pytest, setuptools")
	if out, err := check.CombinedOutput(); err != nil {
		return fmt.Errorf("python environment: the installed packages do not import: %v\n%s", err, out)
	}
	return os.WriteFile(filepath.Join(dir, completeMark), python.Lock, 0o644)
}

// baseInterpreter picks the Python the environment is made from: 3.11 or newer
// (the lock's numpy needs it).
func baseInterpreter() (string, error) {
	cands := []string{os.Getenv(BaseEnvVar), "python3", "/usr/bin/python3", "python3.13", "python3.12", "python3.11"}
	var tried []string
	for _, c := range cands {
		if c == "" {
			continue
		}
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		tried = append(tried, p)
		if exec.Command(p, "-c", "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))").Run() == nil {
			return p, nil
		}
	}
	if len(tried) == 0 {
		return "", errors.New("python environment: no python3 found; install Python 3.11 or newer (Debian: apt-get install python3 python3-venv)")
	}
	return "", fmt.Errorf("python environment: none of %v is Python 3.11+ with venv and ensurepip (Debian: apt-get install python3-venv); or set %s", tried, BaseEnvVar)
}
