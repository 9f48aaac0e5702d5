// Package python_test runs the creditflow Python package's tests and the end-to-end tests
// that drive it as separate processes (rollout workers, trainers) against `creditflow
// broker` and `creditflow run`. They use the project's Python environment
// (internal/pyenv, python/requirements.lock; built on first use).
package python_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/syncbuf"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// repoRoot is the repository root (this package lives in python/).
func repoRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// creditflowBin builds cmd/creditflow once per test binary.
func creditflowBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "creditflow-python-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "creditflow")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/creditflow")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/creditflow: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// projectPython is the project's Python environment (internal/pyenv): numpy,
// confluent-kafka, torch, fastavro, avro, pytest.
func projectPython(t *testing.T) string {
	t.Helper()
	return pyenvtest.Python(t)
}

// pyEnv makes the package importable from the checkout.
func pyEnv(t *testing.T) []string {
	return append(os.Environ(), "PYTHONPATH="+filepath.Join(repoRoot(t), "python"), "PYTHONDONTWRITEBYTECODE=1")
}

// runPy runs a Python command to completion in the repository root and returns stdout.
func runPy(t *testing.T, py string, timeout time.Duration, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = pyEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", py, strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// syncBuffer is a child process's output, read while it runs.
type syncBuffer = syncbuf.Buffer

// proc is a background process killed at the end of the test.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	if len(args) > 0 && args[0] == "run" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-addr") }) {
		// `run` serves metrics on 127.0.0.1:9464 by default: a test must not
		// depend on a fixed port being free.
		t.Fatalf("starting `creditflow run` without --metrics-addr (it would bind the fixed default port): %v", args)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = env
	p := &proc{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		p.done <- nil
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
}

// wait waits for the process to exit and returns its error.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(timeout):
		p.kill()
		t.Fatalf("%s did not finish within %v\n%s", p.cmd.Path, timeout, p.out.String())
		return nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startBroker runs `creditflow broker` on a free port and waits until it accepts connections.
func startBroker(t *testing.T) string {
	t.Helper()
	addr := freeAddr(t)
	p := startProc(t, os.Environ(), creditflowBin(t), "broker", "--addr", addr, "--partitions", "4", "--log-level", "warn")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("broker did not listen on %s\n%s", addr, p.out.String())
	return ""
}

// runHelp returns `creditflow run -h`.
func runHelp(t *testing.T) string {
	out, _ := exec.Command(creditflowBin(t), "run", "-h").CombinedOutput()
	return string(out)
}

// countLines counts the lines of a file (0 when absent).
func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		n++
	}
	return n
}
