package scorer_test

import (
	"testing"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
)

// A scorer that computes K×K graphs answers a lower call with each graph
// cut by stepgraph.Cut and a K×K call with the graphs themselves, with the
// policy version it was given either way.
func TestNewAttentionResult(t *testing.T) {
	graphs := scorertest.ExpectedGraphs(t, scorertest.MakeJobs(5, 3))
	full := scorer.NewAttentionResult(scorer.AttentionOptions{}, graphs, 4)
	if full.PolicyVersion != 4 || full.Lower != nil || len(full.Graphs) != len(graphs) {
		t.Fatalf("K×K answer: version %d, %d lower and %d K×K jobs; want 4, 0 and %d", full.PolicyVersion, len(full.Lower), len(full.Graphs), len(graphs))
	}
	scorertest.EqualGraphs(t, "K×K answer", full.Graphs, graphs)
	lower := scorer.NewAttentionResult(scorer.AttentionOptions{Lower: true}, graphs, -1)
	if lower.PolicyVersion != -1 || lower.Graphs != nil || len(lower.Lower) != len(graphs) {
		t.Fatalf("lower answer: version %d, %d K×K and %d lower jobs; want -1, 0 and %d", lower.PolicyVersion, len(lower.Graphs), len(lower.Lower), len(graphs))
	}
	want := make([][]scorer.LowerGraph, len(graphs))
	for i, gs := range graphs {
		for _, g := range gs {
			want[i] = append(want[i], stepgraph.Cut(g.Layer, g.AA, g.AO))
		}
	}
	scorertest.EqualLowerGraphs(t, "lower answer", lower.Lower, want)
	if scorer.CutGraphs(nil) != nil {
		t.Error("CutGraphs(nil) is not nil")
	}
}
