package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
)

func TestCreditFlagsValidate(t *testing.T) {
	fs := newFlagSet("x", "usage: x")
	cfg := credit.DefaultConfig()
	apply := creditFlags(fs, &cfg)
	if err := fs.Parse([]string{"--no-gate", "--eligible-kinds", "search, tool", "--lambda", "1"}); err != nil {
		t.Fatal(err)
	}
	if err := apply(); err != nil {
		t.Fatal(err)
	}
	if cfg.Gate || cfg.Lambda != 1 || len(cfg.EligibleKinds) != 2 || cfg.EligibleKinds[1] != "tool" {
		t.Fatalf("%+v", cfg)
	}
	fs = newFlagSet("x", "usage: x")
	cfg = credit.DefaultConfig()
	apply = creditFlags(fs, &cfg)
	_ = fs.Parse([]string{"--ema-delta", "2"})
	if err := apply(); err == nil {
		t.Fatal("δ = 2 accepted")
	}
}

// A bad value in the config file or the environment says what was read
// and what was wanted.
func TestBadSettingValueSaysWhatWasRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(`{"lambda": "lots"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runCompute([]string{"--config", file})
	if err == nil || !strings.Contains(err.Error(), `lambda: read "lots", want a number`) {
		t.Fatalf("config file: %v", err)
	}
	t.Setenv("CREDITFLOW_WINDOW_TIMEOUT", "3x")
	err = runStages(t.Context(), []string{"--metrics-addr", ""})
	if err == nil || !strings.Contains(err.Error(), `CREDITFLOW_WINDOW_TIMEOUT: read "3x", want a duration`) {
		t.Fatalf("environment: %v", err)
	}
}

// The flag that lifts the non-empty-segments rule in trajectories without an
// answer turn is named for what it does; the old name still works and says
// it is deprecated. The default keeps the rule.
func TestNoAnswerEmptySegmentsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--no-answer-empty-segments-eligible"}, true},
		{[]string{"--no-answer-all-kinds-eligible"}, true},
	} {
		fs := newFlagSet("compute", "usage: compute")
		cfg := credit.DefaultConfig()
		apply := creditFlags(fs, &cfg)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if err := apply(); err != nil {
			t.Fatal(err)
		}
		if cfg.NoAnswerEmptySegmentsEligible != tc.want {
			t.Errorf("%v: NoAnswerEmptySegmentsEligible = %v, want %v", tc.args, cfg.NoAnswerEmptySegmentsEligible, tc.want)
		}
	}
	fs := newFlagSet("compute", "usage: compute")
	cfg := credit.DefaultConfig()
	creditFlags(fs, &cfg)
	if f := fs.Lookup("no-answer-all-kinds-eligible"); f == nil || !strings.Contains(f.Usage, "deprecated") {
		t.Errorf("old flag name should remain as a deprecated alias, got %+v", f)
	}
}
