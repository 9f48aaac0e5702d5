package main

import (
	"context"
	"testing"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

// Every bench size makes valid trajectories of the size it names.
func TestBenchSizes(t *testing.T) {
	lim := schemas.DefaultLimits()
	lim.VocabSize = newBenchInstantScorer().info.VocabSize
	for _, s := range benchSizes {
		lim.MaxTokens = max(schemas.DefaultMaxTokens, s.Tokens+1024)
		for g := 0; g < 3; g++ {
			tr := s.trajectory(7, g, g%benchGroupSize)
			if err := schemas.ValidateTrajectory(&tr, lim); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			if n := trajectoryTokens(&tr); s.Tokens > 0 && n != s.Tokens {
				t.Fatalf("%s: %d tokens, want %d", s.Name, n, s.Tokens)
			}
			if s.Steps > 0 && len(tr.Turns) != s.Steps {
				t.Fatalf("%s: %d steps, want %d", s.Name, len(tr.Turns), s.Steps)
			}
		}
		if n := s.records(2000); n%benchGroupSize != 0 || n < 4*benchGroupSize {
			t.Fatalf("%s: %d records for 2000", s.Name, n)
		}
	}
}

// A small bench run measures every phase of the default size: rates,
// latency and memory are positive and consistent.
func TestBenchRunsEveryPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stages on an embedded broker")
	}
	o := benchOptions{records: 100, partitions: 2, openGroups: 200, repeat: 1, timeout: 90 * time.Second, seed: 7}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := runBench(ctx, o, []benchSize{benchSizes[0], benchSizes[len(benchSizes)-1]})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append([]SizeResult{res.SizeResult}, res.Sizes...) {
		if r.Error != "" {
			t.Fatalf("%s: %s", r.Size, r.Error)
		}
		if r.PassthroughPerS <= 0 || r.ScorePerS <= 0 || r.AdvantagePerS <= 0 || r.OverheadP99Ms < r.OverheadP50Ms ||
			r.OverheadP50Ms <= 0 || r.BytesPerOpenMember <= 0 || r.RecordBytes <= r.TrajectoryBytes {
			t.Fatalf("%s: implausible result %+v", r.Size, r)
		}
		if want := r.ScorePerS / r.PassthroughPerS; r.ScoreVsPassthrough < want-0.01 || r.ScoreVsPassthrough > want+0.01 {
			t.Fatalf("%s: score_vs_passthrough %v, want %v", r.Size, r.ScoreVsPassthrough, want)
		}
	}
	if len(res.Sizes) != 1 || res.Sizes[0].Size != "attnsr-k30" || res.OpenGroups != 200 {
		t.Fatalf("sizes %+v, open groups %d", res.Sizes, res.OpenGroups)
	}
}
