// Package pyenvtest gives tests the project's Python environment (internal/pyenv).
package pyenvtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/pyenv"
)

var (
	testOnce sync.Once
	testPy   string
	testErr  error
	testLog  strings.Builder
)

// ensure builds the environment once per test binary; under CI=true (CI installs
// everything the tests use) not having it fails the test.
func ensure(tb testing.TB) (string, error) {
	tb.Helper()
	testOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		testPy, testErr = pyenv.Ensure(ctx, &testLog)
	})
	if testErr != nil && os.Getenv("CI") == "true" {
		tb.Fatalf("the project's Python environment: %v\n%s", testErr, testLog.String())
	}
	return testPy, testErr
}

// Python returns the environment's interpreter, building the environment when
// it is missing. Where it cannot be had the test fails under CI=true and skips
// elsewhere, saying why.
func Python(tb testing.TB) string {
	tb.Helper()
	py, err := ensure(tb)
	if err != nil {
		tb.Skipf("the project's Python environment could not be built here: %v", err)
	}
	return py
}

// Optional is Python for a test with a part that needs no Python: it returns ""
// where the environment cannot be had outside CI (the caller skips that part,
// and the reason is logged); under CI=true that is a failure, as in Python.
func Optional(tb testing.TB) string {
	tb.Helper()
	py, err := ensure(tb)
	if err != nil {
		tb.Logf("the project's Python environment could not be built here: %v", err)
		return ""
	}
	return py
}

// Command is exec.Command on the environment's interpreter.
func Command(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	return exec.Command(Python(tb), args...)
}
