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
	// separate the means by 0.25. Reaching 0.8: lapo at step 2 once, never
	// once (3 = steps + 1); grpo never.
	md := c.Markdown()
	for _, want := range []string{
		"| lapo | grpo | searchqa | final success | 0.800 | 0.550 | +0.250 | 2 + 2 | 0.333 |",
		"| lapo | grpo | searchqa | first step ≥ 0.8 (never: steps + 1) | 2.5 | 3.0 | -0.5 | 2 + 2 |",
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
	if ok, why := rs[0].Matches(o); !ok { // no settings recorded: steps and trajectories per step agree
		t.Errorf("an older summary of the same run does not match: %s", why)
	}
	o2 := o
	o2.GroupSize = 8
	if ok, _ := rs[0].Matches(o2); ok {
		t.Error("a run of 3 groups of 5 matches options of 3 groups of 8")
	}
	s.Settings = settingsOf(o.resolved())
	if ok, why := s.Matches(o); !ok {
		t.Errorf("recorded settings: %s", why)
	}
	o3 := o
	o3.LR = 1e-3
	if ok, _ := s.Matches(o3); ok {
		t.Error("a run with another learning rate matches")
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
	c.Runs[2].World = "household"
	c.Runs[0].Settings = &Settings{JudgeNoise: 0.3}
	if got, want := c.Title(), "creditflow learn: lapo vs grpo, the judge wrong 30% of the time, 2 seeds each"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
}
