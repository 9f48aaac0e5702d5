package pod_test

// The workloads the pod is checked with and the comparisons against the Go
// reference scorer.

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/gpu"
	"github.com/creditflow/creditflow/internal/stepgraph"
)

// searchSets builds LAPO backward row sets shaped like search QA (prompt,
// turns of action + observation, one row with every turn and one per turn
// replaced by the placeholder), scaled down for a CPU.
func searchSets(r *rand.Rand, n, vocab int, placeholder int32) []gpu.RowSet {
	tok := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(r.Intn(vocab))
		}
		return out
	}
	var sets []gpu.RowSet
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
		rows := []gpu.Row{{Context: full, Target: target, Span: span}}
		for k := range turns {
			ctx := append([]int32(nil), prompt...)
			for i, tt := range turns {
				if i == k {
					ctx = append(ctx, placeholder)
				} else {
					ctx = append(ctx, tt...)
				}
			}
			rows = append(rows, gpu.Row{Context: ctx, Target: target, Span: span})
		}
		sets = append(sets, gpu.RowSet{ID: fmt.Sprintf("traj-%d", s), Rows: rows})
	}
	return sets
}

// graphJobs builds AttnSR jobs with more than one 128-token query block.
func graphJobs(r *rand.Rand, n, vocab, layers int) []gpu.AttentionJob {
	var jobs []gpu.AttentionJob
	for j := 0; j < n; j++ {
		pos := 30 + r.Intn(20)
		K := 3 + r.Intn(4)
		var steps []gpu.Step
		for k := 0; k < K; k++ {
			a := 20 + r.Intn(40)
			st := gpu.Step{Action: [2]int{pos, pos + a}}
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
		jobs = append(jobs, gpu.AttentionJob{ID: fmt.Sprintf("job-%d", j), Tokens: toks, Steps: steps, Layers: ls})
	}
	return jobs
}

// checkScores scores sets on the pod and on the reference and compares (1e-4).
func checkScores(t *testing.T, ctx context.Context, pod, ref gpu.Scorer, sets []gpu.RowSet, what string) {
	t.Helper()
	got, err := pod.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatalf("%s: pod ScoreRows: %v", what, err)
	}
	exp, err := ref.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	compareScores(t, what, got, exp, 1e-4)
}

// checkGraphs captures step graphs on the pod and on the reference and compares (1e-5).
func checkGraphs(t *testing.T, ctx context.Context, pod, ref gpu.Scorer, jobs []gpu.AttentionJob, what string) {
	t.Helper()
	got, err := pod.Attention(ctx, jobs)
	if err != nil {
		t.Fatalf("%s: pod Attention: %v", what, err)
	}
	exp, err := ref.Attention(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	compareGraphs(t, what, got, exp, 1e-5)
	// The pod's lower-graphs answer (with binary attention requests) is its K×K answer cut
	// by the rule the client and the scored record use, bit for bit.
	la, ok := pod.(gpu.LowerAttentioner)
	if !ok {
		return
	}
	lower, _, err := la.AttentionLower(ctx, jobs)
	if err != nil {
		t.Fatalf("%s: pod AttentionLower: %v", what, err)
	}
	for i, gs := range got {
		for l, g := range gs {
			want := stepgraph.Cut(g.Layer, g.AA, g.AO)
			if !reflect.DeepEqual(bitsOfLower(lower[i][l]), bitsOfLower(want)) {
				t.Fatalf("%s: job %d layer %d: lower answer %+v, the cut of the K×K answer %+v", what, i, g.Layer, lower[i][l], want)
			}
		}
	}
}

// bitsOfLower is a lower graph with its values as bits (so -0 and NaN compare exactly).
func bitsOfLower(g gpu.LowerGraph) [5][]uint64 {
	bits := func(v []float64) []uint64 {
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = math.Float64bits(x)
		}
		return out
	}
	summed := uint64(0)
	if g.Summed() {
		summed = 1
	}
	return [5][]uint64{{uint64(g.Layer), uint64(g.K), summed}, bits(g.AA), bits(g.AO), bits(g.Sum)}
}

func compareScores(t *testing.T, what string, got, want []gpu.RowScores, tol float64) {
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

func compareGraphs(t *testing.T, what string, got, want [][]gpu.StepGraph, tol float64) {
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

// compactOf rewrites a set in the compact form: the first row's context is
// the set's tokens, every row the prefix and suffix it shares with them as
// spans around literal ids.
func compactOf(s gpu.RowSet) gpu.RowSet {
	base := s.Rows[0].Context
	out := gpu.RowSet{ID: s.ID, Tokens: base, Pieces: make([][]gpu.Piece, len(s.Rows))}
	for j, r := range s.Rows {
		c := r.Context
		p := 0
		for p < len(c) && p < len(base) && c[p] == base[p] {
			p++
		}
		q := 0
		for q < len(c)-p && q < len(base)-p && c[len(c)-1-q] == base[len(base)-1-q] {
			q++
		}
		ps := []gpu.Piece{{Start: 0, End: p}}
		if mid := c[p : len(c)-q]; len(mid) > 0 {
			ps = append(ps, gpu.Piece{Literal: append(gpu.Tokens{}, mid...)})
		}
		if q > 0 {
			ps = append(ps, gpu.Piece{Start: len(base) - q, End: len(base)})
		}
		out.Pieces[j] = ps
		r.Context = nil
		out.Rows = append(out.Rows, r)
	}
	return out
}
