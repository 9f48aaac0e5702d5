package pod_test

// The workloads the pod is checked with and the comparisons against the Go
// reference scorer.

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
)

// searchSets builds LAPO backward row sets shaped like search QA (prompt,
// turns of action + observation, one row with every turn and one per turn
// replaced by the placeholder), scaled down for a CPU.
func searchSets(r *rand.Rand, n, vocab int, placeholder int32) []scorer.RowSet {
	tok := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(r.Intn(vocab))
		}
		return out
	}
	var sets []scorer.RowSet
	for s := 0; s < n; s++ {
		prompt := tok(40 + r.Intn(20))
		turns := make([][]int32, 1+r.Intn(3))
		for i := range turns {
			turns[i] = append(tok(8+r.Intn(8)), tok(30+r.Intn(30))...)
		}
		target := tok(20 + r.Intn(10))
		a := 3 + r.Intn(5)
		span := [2]int{a, a + 3 + r.Intn(6)}
		full := append([]int32(nil), prompt...)
		for _, tt := range turns {
			full = append(full, tt...)
		}
		rows := []scorer.Row{{Context: full, Target: target, Span: span}}
		for k := range turns {
			ctx := append([]int32(nil), prompt...)
			for i, tt := range turns {
				if i == k {
					ctx = append(ctx, placeholder)
				} else {
					ctx = append(ctx, tt...)
				}
			}
			rows = append(rows, scorer.Row{Context: ctx, Target: target, Span: span})
		}
		sets = append(sets, scorer.RowSet{ID: fmt.Sprintf("traj-%d", s), Rows: rows})
	}
	return sets
}

// graphJobs builds AttnSR jobs with more than one 128-token query block.
func graphJobs(r *rand.Rand, n, vocab, layers int) []scorer.AttentionJob {
	var jobs []scorer.AttentionJob
	for j := 0; j < n; j++ {
		pos := 30 + r.Intn(20)
		K := 3 + r.Intn(4)
		var steps []scorer.Step
		for k := 0; k < K; k++ {
			a := 20 + r.Intn(40)
			st := scorer.Step{Action: [2]int{pos, pos + a}}
			pos += a
			if k%3 != 1 {
				o := 10 + r.Intn(40)
				st.Observation = [2]int{pos, pos + o}
				pos += o
			}
			steps = append(steps, st)
		}
		toks := make([]int32, pos)
		for i := range toks {
			toks[i] = int32(r.Intn(vocab))
		}
		ls := []int{0, layers - 1, layers - 1}
		jobs = append(jobs, scorer.AttentionJob{ID: fmt.Sprintf("job-%d", j), Tokens: toks, Steps: steps, Layers: ls})
	}
	return jobs
}

// checkScores scores sets on the pod and on the reference and compares (1e-4).
func checkScores(t *testing.T, ctx context.Context, pod, ref scorer.Scorer, sets []scorer.RowSet, what string) {
	t.Helper()
	got, _, err := pod.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatalf("%s: pod ScoreRows: %v", what, err)
	}
	exp, _, err := ref.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	compareScores(t, what, got, exp, 1e-4)
}

// checkGraphs captures step graphs on the pod and on the reference and compares (1e-5).
func checkGraphs(t *testing.T, ctx context.Context, pod, ref scorer.Scorer, jobs []scorer.AttentionJob, what string) {
	t.Helper()
	got, err := scorertest.Graphs(pod.Attention(ctx, jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatalf("%s: pod Attention: %v", what, err)
	}
	exp, err := scorertest.Graphs(ref.Attention(ctx, jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	compareGraphs(t, what, got, exp, 1e-5)
	// The pod's lower-graphs answer (with binary attention requests) is its K×K answer cut
	// by the rule the client and the scored record use, bit for bit.
	res, err := pod.Attention(ctx, jobs, scorer.AttentionOptions{Lower: true})
	if err != nil {
		t.Fatalf("%s: pod Attention (lower): %v", what, err)
	}
	lower := res.Lower
	for i, gs := range got {
		for l, g := range gs {
			want := stepgraph.Cut(g.Layer, g.AA, g.AO)
			if !scorertest.SameLower(lower[i][l], want) {
				t.Fatalf("%s: job %d layer %d: lower answer %+v, the cut of the K×K answer %+v", what, i, g.Layer, lower[i][l], want)
			}
		}
	}
}

func compareScores(t *testing.T, what string, got, want []scorer.RowScores, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d sets, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		if len(got[i].Scores) != len(want[i].Scores) {
			t.Fatalf("%s: set %d has %d scores, want %d", what, i, len(got[i].Scores), len(want[i].Scores))
		}
		if got[i].Truncations != want[i].Truncations {
			t.Errorf("%s: set %d truncations %d, want %d", what, i, got[i].Truncations, want[i].Truncations)
		}
		for j, w := range want[i].Scores {
			d := math.Abs(got[i].Scores[j] - w)
			if !(d <= tol) {
				t.Errorf("%s: set %d row %d: pod S = %.9f, reference %.9f (|diff| %.2e > %.0e)", what, i, j, got[i].Scores[j], w, d, tol)
			}
			worst = math.Max(worst, d)
		}
	}
	t.Logf("%s: max |S_pod − S_ref| = %.3e over %d sets", what, worst, len(want))
}

func compareGraphs(t *testing.T, what string, got, want [][]scorer.StepGraph, tol float64) {
	t.Helper()
	worst := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: job %d has %d graphs, want %d", what, i, len(got[i]), len(want[i]))
		}
		for l := range want[i] {
			g, w := got[i][l], want[i][l]
			if g.Layer != w.Layer {
				t.Fatalf("%s: job %d graph %d is layer %d, want %d", what, i, l, g.Layer, w.Layer)
			}
			for _, m := range []struct{ g, w [][]float64 }{{g.AA, w.AA}, {g.AO, w.AO}} {
				for j := range m.w {
					for k := range m.w[j] {
						d := math.Abs(m.g[j][k] - m.w[j][k])
						if !(d <= tol) {
							t.Errorf("%s: job %d layer %d [%d][%d]: pod %.9f, reference %.9f", what, i, w.Layer, j, k, m.g[j][k], m.w[j][k])
						}
						worst = math.Max(worst, d)
					}
				}
			}
		}
	}
	t.Logf("%s: max |G_pod − G_ref| = %.3e over %d jobs", what, worst, len(want))
}
