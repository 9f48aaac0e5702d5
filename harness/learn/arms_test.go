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
		{"ppo+oracle", "", "--method attnsr --attnsr-output ppo --beta 0"},
		{"ppo+oracle+once", "", "--method attnsr --attnsr-output ppo --beta 0"},
		{"oracle+once", "", "--method lapo --lambda 0"},
		{"attnsr+uniform", "", "--method attnsr --attnsr-output grpo --beta 0.25 --rho 0 --eta 0"},
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
	p, _ := WithArm(base, "ppo")
	po, _ := WithArm(base, "ppo+oracle")
	if ok, why := (Summary{Method: "ppo", World: "widesearch", Seed: 1, Settings: settingsOf(po)}).Matches(p); ok || !strings.Contains(why, "oracle_steps") {
		t.Errorf("a PPO run with the oracle's step rewards joins plain PPO (%q)", why)
	}
	if !po.oracle() || p.oracle() || !settingsOf(po).OracleSteps || settingsOf(po).Lambda != 0.5 {
		t.Errorf("ppo+oracle: oracle %v (ppo %v), settings %+v", po.oracle(), p.oracle(), settingsOf(po))
	}
	pon, _ := WithArm(base, "ppo+oracle+once")
	if ok, why := (Summary{Method: "ppo", World: "widesearch", Seed: 1, Settings: settingsOf(pon)}).Matches(po); ok || !strings.Contains(why, "oracle_once") {
		t.Errorf("a run paying each label once joins ppo+oracle (%q)", why)
	}
	// The terminal control: the processor as the even spread, the trainer moves the step
	// rewards; it needs the ppo output, and its runs never join the even spread's.
	pb := base
	pb.AttnSROutput = "ppo"
	ut, err := WithArm(pb, "attnsr+uniform+terminal")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ut.processorArgs(), " "); got != "--method attnsr --attnsr-output ppo --beta 0.25 --rho 0 --eta 0" {
		t.Errorf("attnsr+uniform+terminal: processor %q", got)
	}
	st := Summary{Method: "attnsr", World: "widesearch", Seed: 1, Settings: settingsOf(ut)}
	if st.Arm() != "attnsr+uniform+terminal" {
		t.Errorf("attnsr+uniform+terminal recorded as %q", st.Arm())
	}
	un, _ := WithArm(pb, "attnsr+uniform")
	if ok, why := st.Matches(un); ok || !strings.Contains(why, "attnsr_terminal") {
		t.Errorf("a run with the step rewards at the end joins the even spread (%q)", why)
	}
	if _, err := WithArm(base, "attnsr+terminal"); err == nil || !strings.Contains(err.Error(), "attnsr-output ppo") {
		t.Errorf("attnsr+terminal with the grpo output (no step rewards to move): %v", err)
	}
	// A run recorded before the controls existed is still the arm of its method.
	old := Summary{Method: "lapo", World: "widesearch", Settings: &Settings{Method: "lapo", Direction: "backward"}}
	if old.Arm() != "lapo" {
		t.Errorf("an earlier LAPO run is arm %q", old.Arm())
	}
	for _, bad := range []string{"lapo+luck", "grpo+label-noise", "oracle+forward+", "nothing", "grpo+oracle", "attnsr+oracle", "ppo+once", "grpo+once", "ppo+uniform", "lapo+uniform", "ppo+terminal", "grpo+terminal"} {
		if _, err := WithArm(base, bad); err == nil {
			t.Errorf("arm %q accepted", bad)
		}
	}
	hh := base
	hh.World = "household"
	if _, err := WithArm(hh, "grpo+likelihood"); err == nil || !strings.Contains(err.Error(), "gold answer") {
		t.Errorf("a likelihood reward on the household world (no gold answer): %v", err)
	}
	// The gold bonus needs only a gold string that the evidence shows: the household's code.
	if o, err := WithArm(hh, "grpo+gold-bonus"); err != nil || strings.Join(o.workerArgs(), " ") != "--reward gold-bonus --gold-bonus 0.5" {
		t.Errorf("grpo+gold-bonus on the household world: %v", err)
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

// TestNoiseSweepKeepsLevelsApart: a comparison holding runs of several judge noises (a
// sweep) has one arm per method and level, and compares methods only at one level.
func TestNoiseSweepKeepsLevelsApart(t *testing.T) {
	at := func(s Summary, q float64) Summary {
		o := Defaults()
		o.Method, o.World, o.JudgeNoise = s.Method, "searchqa", q
		s.Settings = settingsOf(o)
		return s
	}
	var runs []Summary
	for _, q := range []float64{0, 0.3} {
		runs = append(runs, at(run3("lapo", 1, 0.4, 0.6, 0.9), q), at(run3("lapo", 2, 0.4, 0.7, 0.8), q),
			at(run3("grpo", 1, 0.4, 0.5, 0.6), q), at(run3("grpo", 2, 0.4, 0.5, 0.5), q))
	}
	c := Comparison{Runs: runs}
	if k := c.methods(); len(k) != 4 || k[0] != "lapo/searchqa, judge noise 0" || k[3] != "grpo/searchqa, judge noise 0.3" {
		t.Fatalf("keys %q", k)
	}
	d := c.Differences()
	if len(d) != 2*len(measures) {
		t.Fatalf("%d differences, want lapo against grpo at each of 2 levels (%d)", len(d), 2*len(measures))
	}
	for _, x := range d {
		if world(x.A) != world(x.B) {
			t.Errorf("compared across levels: %s against %s", x.A, x.B)
		}
	}
	if !strings.Contains(c.Title(), "several noise levels") {
		t.Errorf("title %q", c.Title())
	}
	// One level: keys as before.
	if k := (Comparison{Runs: runs[:4]}).methods(); k[0] != "lapo/searchqa" {
		t.Errorf("one level: keys %q", k)
	}
}

// TestNoiseSweepFromEarlierRuns: `--compare lapo,grpo --noise-sweep 0,0.3 --from …` builds
// the sweep from runs made before (nothing runs when every arm, level and seed is there), in
// the order level, arm, seed, and refuses none of them.
func TestNoiseSweepFromEarlierRuns(t *testing.T) {
	var earlier []Summary
	for _, q := range []float64{0.3, 0} {
		for _, m := range []string{"grpo", "lapo"} {
			for s := 1; s <= 2; s++ {
				o := Defaults()
				o.Method, o.Seed, o.JudgeNoise = m, s, q
				r := run3(m, s, 0.4, 0.5+q/10)
				r.Settings = settingsOf(o.resolved())
				earlier = append(earlier, r)
			}
		}
	}
	out := t.TempDir() + "/sweep"
	var stdout, stderr strings.Builder
	c := CompareRuns{Methods: []string{"lapo", "grpo"}, Noises: []float64{0, 0.3}, Seeds: 2, Earlier: earlier, Out: out}
	if err := c.Run(t.Context(), Defaults(), &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "not taken") || strings.Count(stderr.String(), "taken from --from") != 8 {
		t.Errorf("want all 8 runs taken:\n%s", stderr.String())
	}
	runs, err := LoadRuns(out + ".json")
	if err != nil || len(runs) != 8 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	if runs[0].Settings.JudgeNoise != 0 || runs[0].Method != "lapo" || runs[7].Settings.JudgeNoise != 0.3 || runs[7].Method != "grpo" {
		t.Errorf("order: first %s at %v, last %s at %v", runs[0].Method, runs[0].Settings.JudgeNoise, runs[7].Method, runs[7].Settings.JudgeNoise)
	}
	for _, want := range []string{"| lapo | searchqa, judge noise 0 | 2 |", "| grpo | searchqa, judge noise 0.3 | 2 |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}
