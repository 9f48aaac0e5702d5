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

// Python returns the environment's interpreter, building the environment when
// it is missing. Where it cannot be had the test fails under CI=true (CI installs
// everything the tests use) and skips elsewhere, saying why.
func Python(tb testing.TB) string {
	tb.Helper()
	testOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		testPy, testErr = pyenv.Ensure(ctx, &testLog)
	})
	if testErr != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("the project's Python environment: %v\n%s", testErr, testLog.String())
		}
		tb.Skipf("the project's Python environment could not be built here: %v", testErr)
	}
	return testPy
}

// Command is exec.Command on the environment's interpreter.
func Command(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	return exec.Command(Python(tb), args...)
}
