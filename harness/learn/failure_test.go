package learn

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestFailedRunKeepsTheLogItNames: a run without --dir whose processor
// fails returns an error naming the processor's log, and that log still
// exists when Run has returned (the temporary run folder of a failed run is
// kept, and the error says so); a successful run's folder is removed.
func TestFailedRunKeepsTheLogItNames(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the run folder is made here
	bin := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(bin, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	o := Defaults()
	o.Exe = script("creditflow", `echo "processor failed on purpose" >&2; exit 3`)
	o.Python = script("python", `exec sleep 60`)
	o.Steps, o.Timeout = 1, 2*time.Minute
	_, err := Run(context.Background(), o)
	if err == nil {
		t.Fatal("a run whose processor exits succeeded")
	}
	m := regexp.MustCompile(`see (\S+processor\.log)\)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("the error names no processor log: %v", err)
	}
	b, rerr := os.ReadFile(m[1])
	if rerr != nil {
		t.Fatalf("the log the error names is gone: %v (error: %v)", rerr, err)
	}
	if !strings.Contains(string(b), "processor failed on purpose") {
		t.Errorf("the log does not hold the processor's stderr: %q", b)
	}
	if !strings.Contains(err.Error(), "is kept") {
		t.Errorf("the error does not say the folder is kept: %v", err)
	}
}
