package learn

import (
	"strings"
	"testing"
)

// TestArmsRoundTrip: an arm's name sets the options it names, a run made with them records
// settings that name the same arm again, and the arms of one comparison are kept apart in its
// table (a run of LAPO and one of LAPO+forward are two rows of means, not one).
func TestArmsRoundTrip(t *testing.T) {
	base := Defaults()
	base.World, base.JudgeNoise = "widesearch", 0.3
	for _, c := range []struct {
		arm    string
		worker string // the worker flags the arm adds
		proc   string // the processor's credit flags
	}{
		{"lapo", "", "--method lapo --lambda 0.5 --direction backward"},
		{"grpo", "", "--method lapo --lambda 0"},
		{"oracle", "", "--method lapo --lambda 0"},
		{"lapo+forward", "", "--method lapo --lambda 0.5 --direction forward"},
		{"lapo+no-gate", "", "--method lapo --lambda 0.5 --direction backward --no-gate"},
		{"lapo+label-noise", "--label-noise", "--method lapo --lambda 0.5 --direction backward"},
		{"grpo+likelihood", "--reward likelihood --gold-bonus 0.5", "--method lapo --lambda 0"},
		{"grpo+gold-bonus", "--reward gold-bonus --gold-bonus 0.5", "--method lapo --lambda 0"},
		{"grpo+likelihood-bonus", "--reward likelihood-bonus --gold-bonus 0.5", "--method lapo --lambda 0"},
		{"lapo+forward+no-gate", "", "--method lapo --lambda 0.5 --direction forward --no-gate"},
	} {
		o, err := WithArm(base, c.arm)
		if err != nil {
			t.Fatalf("%s: %v", c.arm, err)
		}
		if got := strings.Join(o.processorArgs(), " "); got != c.proc {
			t.Errorf("%s: processor %q, want %q", c.arm, got, c.proc)
		}
		if got := strings.Join(o.workerArgs(), " "); got != c.worker {
			t.Errorf("%s: worker flags %q, want %q", c.arm, got, c.worker)
		}
		s := Summary{Method: o.Method, World: o.World, Seed: o.Seed, Settings: settingsOf(o.resolved())}
		if s.Arm() != c.arm {
			t.Errorf("%s: the recorded settings name the arm %q", c.arm, s.Arm())
		}
		if ok, why := s.Matches(o); !ok {
			t.Errorf("%s: a run does not match its own options: %s", c.arm, why)
		}
	}
	// Two arms of one method never join each other's runs.
	l, _ := WithArm(base, "lapo")
	f, _ := WithArm(base, "lapo+forward")
	if ok, _ := (Summary{Method: "lapo", World: "widesearch", Seed: 1, Settings: settingsOf(f)}).Matches(l); ok {
		t.Error("a forward run matches a backward comparison")
	}
	g, _ := WithArm(base, "grpo")
	lk, _ := WithArm(base, "grpo+likelihood")
	if ok, why := (Summary{Method: "grpo", World: "widesearch", Seed: 1, Settings: settingsOf(lk)}).Matches(g); ok || !strings.Contains(why, "reward") {
		t.Errorf("a likelihood-reward run joins plain GRPO (%q)", why)
	}
	// A run recorded before the controls existed is still the arm of its method.
	old := Summary{Method: "lapo", World: "widesearch", Settings: &Settings{Method: "lapo", Direction: "backward"}}
	if old.Arm() != "lapo" {
		t.Errorf("an earlier LAPO run is arm %q", old.Arm())
	}
	for _, bad := range []string{"lapo+luck", "grpo+label-noise", "oracle+forward+", "nothing"} {
		if _, err := WithArm(base, bad); err == nil {
			t.Errorf("arm %q accepted", bad)
		}
	}
	hh := base
	hh.World = "household"
	if _, err := WithArm(hh, "grpo+likelihood"); err == nil || !strings.Contains(err.Error(), "gold answer") {
		t.Errorf("a likelihood reward on the household world (no gold answer): %v", err)
	}

	c := Comparison{Runs: []Summary{
		withSettings(run3("lapo", 1, 0.4, 0.6, 0.9), l), withSettings(run3("lapo", 2, 0.4, 0.7, 0.8), l),
		withSettings(run3("lapo", 1, 0.4, 0.5, 0.6), f), withSettings(run3("lapo", 2, 0.4, 0.5, 0.5), f),
	}}
	md := c.Markdown()
	for _, want := range []string{"| lapo | searchqa | 2 | 0.850 ± 0.071 |", "| lapo+forward | searchqa | 2 | 0.550 ± 0.071 |", "| lapo+forward | searchqa | 1 | 0.400 | 0.600 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if d := c.Differences(); len(d) == 0 || d[0].A != "lapo/searchqa" || d[0].B != "lapo+forward/searchqa" {
		t.Errorf("differences %+v: want lapo against lapo+forward", d)
	}
}

func withSettings(s Summary, o Options) Summary {
	s.Settings = settingsOf(o)
	return s
}
