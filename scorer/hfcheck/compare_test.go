package hfcheck_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/creditflow/creditflow/scorer"
)

// Tolerances against transformers in float32 (docs/model.md, "Checked
// against transformers").
const (
	// tolScore bounds |S − S_transformers| and the entropy statistic's
	// difference, absolute, in nats; the kl statistic gets twice as much
	// (tolKLFactor): it is the difference of two forwards' log-probabilities
	// (the row's context and its reference context), each carrying S's
	// float32 rounding.
	tolScore    = 2e-5
	tolKLFactor = 2
	// tolGraph bounds a step-graph entry's difference relative to the
	// entry, |g − g_tf| ≤ tolGraph·max(|g_tf|, graphFloor): entries are
	// sums of float32 attention probabilities, whose own resolution is
	// about 1e-7 absolute, so below graphFloor the bound is absolute.
	tolGraph   = 1e-5
	graphFloor = 1e-2
)

// diff accumulates the largest differences of a comparison.
type diff struct {
	abs, rel float64 // largest |got − want| and largest |got − want| / max(|want|, graphFloor)
	n        int
}

func (d *diff) add(got, want float64) {
	a := math.Abs(got - want)
	if math.IsNaN(a) {
		a = math.Inf(1)
	}
	d.abs = math.Max(d.abs, a)
	d.rel = math.Max(d.rel, a/math.Max(math.Abs(want), graphFloor))
	d.n++
}

func (d diff) String() string {
	return fmt.Sprintf("max abs %.2e, max rel %.2e over %d values", d.abs, d.rel, d.n)
}

// scoreDiffs compares scores with transformers' per statistic; want holds
// the reference scores of every row of cases in order.
func scoreDiffs(t *testing.T, cases []rowCase, got [][]float64, want []float64) map[string]*diff {
	t.Helper()
	out := map[string]*diff{}
	k := 0
	for i, rc := range cases {
		if len(got[i]) != len(rc.rows) {
			t.Fatalf("%s: %d scores for %d rows", rc.name, len(got[i]), len(rc.rows))
		}
		d := out[rc.stat]
		if d == nil {
			d = &diff{}
			out[rc.stat] = d
		}
		for _, g := range got[i] {
			if k >= len(want) {
				t.Fatalf("transformers answered %d rows, fewer than asked", len(want))
			}
			d.add(g, want[k])
			k++
		}
	}
	if k != len(want) {
		t.Fatalf("compared %d rows, transformers answered %d", k, len(want))
	}
	return out
}

// checkScores fails where a statistic differs from transformers by more
// than tol and logs the largest differences.
func checkScores(t *testing.T, label string, ds map[string]*diff, tol float64) {
	t.Helper()
	for _, stat := range []string{"logprob", "entropy", "kl"} {
		d := ds[stat]
		if d == nil {
			continue
		}
		t.Logf("%s %s: %v", label, stat, d)
		limit := tol
		if stat == "kl" {
			limit = tolKLFactor * tol
		}
		if !(d.abs <= limit) {
			t.Errorf("%s %s: differs from transformers by %.3e, more than %.0e", label, stat, d.abs, limit)
		}
	}
}

// graphDiff compares step graphs (one job's layers) with transformers'.
func graphDiff(t *testing.T, got []scorer.StepGraph, want refResult, job int) diff {
	t.Helper()
	var d diff
	w := want.Graphs[job]
	if len(got) != len(w) {
		t.Fatalf("%d layers, transformers %d", len(got), len(w))
	}
	for l := range got {
		if got[l].Layer != w[l].Layer {
			t.Fatalf("layer %d, transformers layer %d", got[l].Layer, w[l].Layer)
		}
		for j := range w[l].AA {
			for k := range w[l].AA[j] {
				d.add(got[l].AA[j][k], w[l].AA[j][k])
				d.add(got[l].AO[j][k], w[l].AO[j][k])
			}
		}
	}
	return d
}

func checkGraphs(t *testing.T, label string, d diff, tol float64) {
	t.Helper()
	t.Logf("%s step graphs: %v", label, d)
	if !(d.rel <= tol) {
		t.Errorf("%s step graphs: differ from transformers by %.3e relative (max abs %.3e), more than %.0e", label, d.rel, d.abs, tol)
	}
}
