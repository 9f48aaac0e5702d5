package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemoCtrlC: Ctrl-C (SIGINT) stops `creditflow demo` promptly, while
// samples flow and while it measures where credit lands after the run,
// with exit status 130, the summary of the run so far on stdout and one
// line on stderr that says it was interrupted (not Go's "context
// canceled").
func TestDemoCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	for _, tc := range []struct {
		name, signalAt, summary string
		args                    []string
	}{
		{"while samples flow", "groups in", "interrupted       before the end", []string{"demo", "--groups", "400", "--bad", "0"}},
		{"while measuring where credit lands", "measuring where credit lands", "interrupted       while measuring",
			[]string{"demo", "--groups", "24", "--bad", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			errPipe, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
			defer timer.Stop()
			var stderr []string
			var sent time.Time
			sc := bufio.NewScanner(errPipe)
			for sc.Scan() {
				stderr = append(stderr, sc.Text())
				if sent.IsZero() && strings.Contains(sc.Text(), tc.signalAt) {
					sent = time.Now()
					_ = cmd.Process.Signal(syscall.SIGINT)
				}
			}
			err = cmd.Wait()
			took := time.Since(sent)
			var ee *exec.ExitError
			status := 0
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			}
			if sent.IsZero() {
				t.Fatalf("never saw %q on stderr (exit status %d):\n%s", tc.signalAt, status, strings.Join(stderr, "\n"))
			}
			last := stderr[len(stderr)-1]
			if status != 130 || !strings.HasPrefix(last, "creditflow demo: interrupted") || strings.Contains(strings.Join(stderr, "\n"), "context canceled") {
				t.Errorf("exit status %d (want 130), stderr:\n%s", status, strings.Join(stderr, "\n"))
			}
			if took > 10*time.Second { // generous for a busy machine; a run that ignores SIGINT goes on for its whole length
				t.Errorf("exited %v after SIGINT", took)
			}
			if !strings.Contains(stdout.String(), tc.summary) {
				t.Errorf("summary without %q:\n%s", tc.summary, stdout.String())
			}
			t.Logf("exited %v after SIGINT: %s", took.Round(time.Millisecond), last)
		})
	}
}
