package learn

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPermutationP(t *testing.T) {
	// 20 splits of six runs into three and three; only the observed split and
	// its mirror separate the means by 3.
	if p := permutationP([]float64{1, 2, 3}, []float64{4, 5, 6}); math.Abs(p-0.1) > 1e-12 {
		t.Errorf("p = %v, want 0.1", p)
	}
	if got := formatP(2.0 / 12870); got != "0.00016" {
		t.Errorf("small p written %q", got)
	}
	if got := formatP(0.0294); got != "0.029" {
		t.Errorf("p written %q", got)
	}
	if p := permutationP([]float64{1, 2}, []float64{2, 1}); p != 1 {
		t.Errorf("same values: p = %v, want 1", p)
	}
	// 184,756 splits enumerated against 200,000 drawn: the same p within the
	// drawing's error (sd ≈ 0.001).
	r := rand.New(rand.NewPCG(7, 7))
	var a, b []float64
	for i := 0; i < 10; i++ {
		a = append(a, r.NormFloat64()+0.8)
		b = append(b, r.NormFloat64())
	}
	exact, drawn := permutationTest(a, b, exactSplits), permutationTest(a, b, 0)
	if exact <= 0 || exact >= 1 || math.Abs(exact-drawn) > 0.006 {
		t.Errorf("exact p %v, drawn p %v", exact, drawn)
	}
	// 15 + 15 clearly apart: too many splits to enumerate; none of the drawn
	// ones separates them as much.
	a, b = a[:0], b[:0]
	for i := 0; i < 15; i++ {
		a, b = append(a, 100+float64(i)), append(b, float64(i))
	}
	if p := permutationP(a, b); p != 1.0/(randomSplits+1) {
		t.Errorf("separated: p = %v", p)
	}
}

func TestSignFlipP(t *testing.T) {
	// 8 sign patterns of three positive differences: only all-plus and
	// all-minus reach |mean| 2.
	if p := signFlipP([]float64{1, 2, 3}); math.Abs(p-0.25) > 1e-12 {
		t.Errorf("p = %v, want 0.25", p)
	}
	if p := signFlipP([]float64{1, -1}); p != 1 {
		t.Errorf("differences that cancel: p = %v, want 1", p)
	}
	if p := signFlipP([]float64{0, 0, 0}); p != 1 {
		t.Errorf("no difference: p = %v, want 1", p)
	}
	// ten seeds, each one 0.1 apart in the same direction: 2 of 1,024 patterns
	d := make([]float64, 10)
	for i := range d {
		d[i] = 0.1
	}
	if p := signFlipP(d); math.Abs(p-2.0/1024) > 1e-12 {
		t.Errorf("ten same-signed differences: p = %v, want 2/1024", p)
	}
	// enumerated against drawn (12 differences, 4,096 patterns)
	r := rand.New(rand.NewPCG(5, 5))
	d = d[:0]
	for i := 0; i < 12; i++ {
		d = append(d, r.NormFloat64()+0.5)
	}
	exact, drawn := signFlipTest(d, exactSplits), signFlipTest(d, 0)
	if exact <= 0 || exact >= 1 || math.Abs(exact-drawn) > 0.006 {
		t.Errorf("exact p %v, drawn p %v", exact, drawn)
	}
	// pairing: only seeds both ran, matched by seed not by position
	a := []Summary{run3("lapo", 2, 0.5, 0.9), run3("lapo", 1, 0.5, 0.7), run3("lapo", 3, 0.5, 0.8)}
	b := []Summary{run3("grpo", 1, 0.5, 0.6), run3("grpo", 2, 0.5, 0.5)}
	got := pairedDiffs(a, b, func(s Summary) float64 { return s.FinalSuccess })
	if len(got) != 2 || math.Abs(got[0]-0.4) > 1e-12 || math.Abs(got[1]-0.1) > 1e-12 {
		t.Errorf("paired differences %v, want [0.4 0.1]", got)
	}
}

func TestDifferencesTable(t *testing.T) {
	c := Comparison{Runs: []Summary{
		run3("lapo", 1, 0.4, 0.6, 0.9), run3("lapo", 2, 0.5, 0.7, 0.7),
		run3("grpo", 1, 0.4, 0.5, 0.6), run3("grpo", 2, 0.5, 0.5, 0.5),
		run3("attnsr", 1, 0.4, 0.5, 0.6), // another world below: not compared with these
	}}
	c.Runs[4].World = "household"
	ds := c.Differences()
	if len(ds) != len(measures) {
		t.Fatalf("%d differences, want %d (lapo against grpo only): %+v", len(ds), len(measures), ds)
	}
	// finals 0.9, 0.7 against 0.6, 0.5: of the 6 splits of four runs, two
	// separate the means by 0.25. Reaching 0.8: lapo at step 2 once, the
	// other run never; grpo never: 1 of 2 against 0 of 2.
	md := c.Markdown()
	for _, want := range []string{
		// paired by seed: d = 0.3, 0.2; two of the four sign patterns reach |0.5|
		"| lapo | grpo | searchqa | final success | 0.800 | 0.550 | +0.250 | 2 + 2 | 0.333 | 2 | 0.500 |",
		"| lapo | grpo | searchqa | reached 0.8 (runs) | 1 of 2 | 0 of 2 | +0.50 | 2 + 2 | 1.000 | 2 | 1.000 |",
		"| lapo | searchqa | 2 | 0.800 ± 0.141 | +0.350 ± 0.212 | 0.633 ± 0.000 | 1 of 2 | 2 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

func TestLoadRunsAndMatches(t *testing.T) {
	dir := t.TempDir()
	o := Defaults()
	o.Method, o.Seed, o.World, o.Steps, o.GroupsPerStep = MethodGRPO, 6, "widesearch", 2, 3
	s := run3("grpo", 6, 0.3, 0.5, 0.6)
	s.World, s.TrainerSteps = "widesearch", 2
	s.Eval[1].Trajectories, s.Eval[2].Trajectories = 15, 30
	// the output of `learn --json`: a summary, then the JSON object last
	out := filepath.Join(dir, "grpo-6.out")
	js := `{"method":"grpo","world":"widesearch","seed":6,"trainer_steps":2,"final_success":0.6,"eval":[{"trainer_step":0,"success_rate":0.3},{"trainer_step":1,"trajectories":15,"success_rate":0.5},{"trainer_step":2,"trajectories":30,"success_rate":0.6}]}`
	if err := os.WriteFile(out, []byte("method            grpo on widesearch, seed 6\n"+js+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := LoadRuns(out)
	if err != nil || len(rs) != 1 || rs[0].Seed != 6 || len(rs[0].Eval) != 3 {
		t.Fatalf("LoadRuns: %+v, %v", rs, err)
	}
	if ok, why := rs[0].Matches(o); ok || !strings.Contains(why, "no settings") { // made before runs recorded settings
		t.Errorf("a summary without settings matches (%v, %q)", ok, why)
	}
	s.Settings = settingsOf(o.resolved())
	if ok, why := s.Matches(o); !ok {
		t.Errorf("recorded settings: %s", why)
	}
	// Each setting that changes what a run learns refuses the join, and the
	// reason names it.
	for name, change := range map[string]func(*Options){
		"lr":                 func(o *Options) { o.LR = 1e-3 },
		"group_size":         func(o *Options) { o.GroupSize = 8 },
		"epochs":             func(o *Options) { o.Epochs = 2 },
		"clip":               func(o *Options) { o.Clip = 0.1 },
		"is_cap":             func(o *Options) { o.ISCap = 5 },
		"judge_noise":        func(o *Options) { o.JudgeNoise = 0.3 },
		"groups_per_version": func(o *Options) { o.GroupsPerVersion = 4 },
	} {
		oo := o
		change(&oo)
		if ok, why := s.Matches(oo); ok || !strings.Contains(why, name) {
			t.Errorf("%s changed: match %v (%q)", name, ok, why)
		}
	}
	// LAPO's λ and direction, AttnSR's output: settings of those methods
	lapo := o
	lapo.Method = MethodLAPO
	sl := s
	sl.Method, sl.Settings = MethodLAPO, settingsOf(lapo.resolved())
	for name, change := range map[string]func(*Options){
		"lambda":    func(o *Options) { o.Lambda = 1 },
		"direction": func(o *Options) { o.Direction = "forward" },
		"no_gate":   func(o *Options) { o.NoGate = true },
	} {
		oo := lapo
		change(&oo)
		if ok, why := sl.Matches(oo); ok || !strings.Contains(why, name) {
			t.Errorf("%s changed: match %v (%q)", name, ok, why)
		}
	}
	att := o
	att.Method, att.World = MethodAttnSR, "household"
	sa := s
	sa.Method, sa.World, sa.Settings = MethodAttnSR, "household", settingsOf(att.resolved())
	att.AttnSROutput = "ppo"
	if ok, why := sa.Matches(att); ok || !strings.Contains(why, "attnsr_output") || !strings.Contains(why, "loss") {
		t.Errorf("AttnSR's output changed: match %v (%q)", ok, why)
	}
	if ok, _ := s.Matches(Defaults()); ok {
		t.Error("a widesearch run matches the searchqa default")
	}
	if _, err := LoadRuns(filepath.Join("testdata", "nothing-here")); err == nil {
		t.Error("a missing file loads")
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte("held-out success 0.3 → 0.6\n"), 0o644)
	if _, err := LoadRuns(bad); err == nil || !strings.Contains(err.Error(), "learn --json") {
		t.Errorf("a file without a summary: %v", err)
	}
}

func TestComparisonTitle(t *testing.T) {
	c := Comparison{Runs: []Summary{run3("lapo", 1, 0.4, 0.9), run3("lapo", 2, 0.4, 0.9), run3("grpo", 1, 0.4, 0.6)}}
	if got, want := c.Title(), "creditflow learn: lapo vs grpo on the searchqa world, 2 seeds each"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	many := Comparison{Runs: []Summary{run3("a", 1, 0.4), run3("b", 1, 0.4), run3("c", 1, 0.4), run3("d", 1, 0.4), run3("e", 1, 0.4)}}
	if got, want := many.Title(), "creditflow learn: 5 arms on the searchqa world, 1 seeds each"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	c.Runs[2].World = "household"
	c.Runs[0].Settings = &Settings{JudgeNoise: 0.3}
	if got, want := c.Title(), "creditflow learn: lapo vs grpo, the judge wrong 30% of the time, 2 seeds each"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
}
