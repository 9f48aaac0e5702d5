package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// captureStderr runs fn with os.Stderr redirected and returns what it wrote.
func captureStderr(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	runErr := fn()
	os.Stderr = stderr
	w.Close()
	return string(<-done), runErr
}

// TestEveryFlagHasAGroup: `-h` of every command prints a usage line and
// lists every flag under a concern; a flag defined outside flagSet.inGroup
// would be listed under the "Ungrouped" heading and fails here.
func TestEveryFlagHasAGroup(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out, err := captureStderr(t, func() error { return commands[n].run([]string{"-h"}) })
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: %v", n, err)
			continue
		}
		if !strings.HasPrefix(out, "usage: creditflow "+n) {
			t.Errorf("%s -h does not start with its usage line:\n%s", n, out)
		}
		if strings.Contains(out, "Ungrouped") {
			t.Errorf("%s -h lists flags without a group:\n%s", n, out[strings.Index(out, "Ungrouped"):])
		}
		if strings.Contains(out, "SPEC") {
			t.Errorf("%s -h cites SPEC; cite the project's docs", n)
		}
	}
	// run groups its flags by concern, in this order.
	out, _ := captureStderr(t, func() error { return runRun([]string{"-h"}) })
	last := -1
	for _, g := range []string{groupGeneral, groupKafka, groupTopics, groupScorer, groupCredit, groupLAPO, groupAttnSR, groupWindows, groupSecurity, groupObservability} {
		i := strings.Index(out, "\n"+g+":\n")
		if i < 0 || i < last {
			t.Fatalf("run -h: group %q missing or out of order:\n%s", g, out)
		}
		last = i
	}
}

// TestUnknownFlagIsAShortUsageError: an unknown flag gives one line that
// points to -h (exit status 2 in main), not the whole flag list.
func TestUnknownFlagIsAShortUsageError(t *testing.T) {
	for _, n := range []string{"run", "demo", "compute", "replay", "scorer", "broker", "score", "attention"} {
		out, err := captureStderr(t, func() error { return commands[n].run([]string{"--no-such-flag"}) })
		var ue usageError
		if !errors.As(err, &ue) {
			t.Fatalf("%s --no-such-flag: %v, want a usageError", n, err)
		}
		if !strings.Contains(err.Error(), "unknown flag --no-such-flag;") || !strings.Contains(err.Error(), "creditflow "+n+" -h") ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q, want one line naming --no-such-flag as given", n, err)
		}
		if out != "" {
			t.Errorf("%s printed on an unknown flag:\n%s", n, out)
		}
	}
}

// TestBadFlagValueNamesTheFlagAsGiven: a bad value names the flag the way
// it was typed, on one line.
func TestBadFlagValueNamesTheFlagAsGiven(t *testing.T) {
	_, err := captureStderr(t, func() error { return commands["demo"].run([]string{"--groups=many"}) })
	if err == nil || !strings.Contains(err.Error(), "flag --groups:") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("demo --groups=many: %q, want one line naming --groups", err)
	}
	_, err = captureStderr(t, func() error { return commands["demo"].run([]string{"-bogus"}) })
	if err == nil || !strings.Contains(err.Error(), "unknown flag -bogus;") {
		t.Fatalf("demo -bogus: %q", err)
	}
}

// TestVersion: `creditflow version` prints the module version, a commit
// line and the Go version the binary was built with.
func TestVersion(t *testing.T) {
	out, err := captureStdout(t, func() error { return runVersion(nil) })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "creditflow ") || !strings.Contains(out, "\ncommit ") || !strings.Contains(out, "go         "+runtime.Version()) {
		t.Fatalf("version output:\n%s", out)
	}
	buildVersion, buildCommit = "v9.9.9", "abc123"
	defer func() { buildVersion, buildCommit = "", "" }()
	out, _ = captureStdout(t, func() error { return runVersion(nil) })
	if !strings.HasPrefix(out, "creditflow v9.9.9\ncommit     abc123\n") {
		t.Fatalf("version with -ldflags values:\n%s", out)
	}
}
