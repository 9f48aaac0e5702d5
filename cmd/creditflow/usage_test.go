package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// runMainEnv, when set, makes the test binary run the command line of its
// arguments as the creditflow binary would (TestMain), so tests can check
// exit statuses and exactly what a command prints without a separate build.
const runMainEnv = "CREDITFLOW_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCommand runs `creditflow args…` in a child process (the test binary
// through TestMain) with an empty stdin and returns its stdout, stderr and
// exit status; a command still running after limit is killed and fails the
// test.
func runCommand(t *testing.T, limit time.Duration, env []string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("creditflow %s: still running after %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), limit, out.String(), errOut.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitCode()
	default:
		t.Fatalf("creditflow %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), status
}

// TestUsageErrorsExitTwoWithOneLine: every command, given an unknown flag,
// a bad flag value or a stray argument, exits with status 2 after printing
// exactly one line on stderr and nothing on stdout, quickly (before it
// starts a broker, a scorer or anything else that could hang).
func TestUsageErrorsExitTwoWithOneLine(t *testing.T) {
	cases := map[string][][]string{
		"run": {{"--method", "bogus"}, {"--direction", "bogus"}, {"--lapo-statistic", "bogus"}, {"--log-level", "bogus"},
			{"--stage", "bogus"}, {"--layers", "x"}, {"--attnsr-output", "bogus"}},
		"demo": {{"--method", "bogus"}, {"--direction", "bogus"}, {"--lapo-statistic", "bogus"}, {"--groups", "0"},
			{"--group-size", "0"}, {"--partitions", "0"}, {"--scorers", "0"}, {"--bad", "-1"}, {"--log-level", "bogus"},
			{"--groups", "x"}, {"--eps-r", "0"}, {"--max-ahead", "-1"}},
		"learn": {{"--steps"}, {"--steps", "0"}, {"--method", "bogus"}, {"--world", "bogus"}, {"--judge-noise", "0.7"},
			{"--group-size", "1"}, {"--log-level", "bogus"}},
		"broker":    {{"--partitions", "0"}, {"--log-level", "bogus"}, {"--tls-ca", "x"}},
		"monitor":   {{"--reward-min", "2", "--reward-max", "1"}, {"--log-level", "bogus"}},
		"inspect":   {{}, {"--by", "bogus", "--trajectory", "x"}, {"--best", "0"}, {"--compare", "x", "--best", "1"}},
		"scorer":    {{"--log-level", "bogus"}, {"--tls-cert", "x"}},
		"announce":  {{}, {"--version", "-1"}},
		"replay":    {{"--method", "bogus"}, {"--log-level", "bogus"}},
		"compute":   {{"--method", "bogus"}, {"--direction", "bogus"}, {"--lapo-statistic", "bogus"}},
		"score":     {{"--statistic", "bogus"}},
		"attention": {},
		"version":   {},
		"pyenv":     {},
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
		if _, ok := cases[n]; !ok {
			t.Errorf("command %s has no usage-error cases here: add its unknown flag and bad values", n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		lines := append([][]string{{"--no-such-flag"}, {"stray-argument"}}, cases[n]...)
		for _, args := range lines {
			args := append([]string{n}, args...)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				env := []string{"CREDITFLOW_CONFIG=", "CREDITFLOW_BROKERS=127.0.0.1:1"}
				stdout, stderr, status := runCommand(t, 20*time.Second, env, args...)
				if status != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") ||
					!strings.HasPrefix(stderr, "creditflow "+n+": ") {
					t.Errorf("exit status %d (want 2), stdout %q (want nothing), stderr %q (want one line)", status, stdout, stderr)
				}
			})
		}
	}
}

// TestMissingFlagValueNamesTheFlagAsTyped: `learn --steps` without a value
// names --steps, as the user typed it, not the flag package's -steps.
func TestMissingFlagValueNamesTheFlagAsTyped(t *testing.T) {
	err := runLearn([]string{"--steps"})
	var ue usageError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "flag needs an argument: --steps;") {
		t.Fatalf("learn --steps: %v", err)
	}
}
