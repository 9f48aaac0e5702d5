package protocol_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// randomStepGraphs: K×K graph pairs whose entries are attention masses, and
// now and then an entry that keeps a layer out of the sum form (a mass whose
// halving underflows, one above 1, a NaN, a negative zero's partner).
func randomStepGraphs(r *rand.Rand, k, layers int) []scorer.StepGraph {
	odd := []float64{math.SmallestNonzeroFloat64, 3e-308, 1.5, math.NaN(), -0.25, math.Copysign(0, -1)}
	out := make([]scorer.StepGraph, layers)
	for l := range out {
		g := scorer.StepGraph{Layer: 3*l - 1, AA: make([][]float64, k), AO: make([][]float64, k)}
		spoil := r.IntN(3) == 0
		for j := 0; j < k; j++ {
			g.AA[j], g.AO[j] = make([]float64, k), make([]float64, k)
			for c := 0; c < k; c++ {
				g.AA[j][c], g.AO[j][c] = r.Float64()/float64(k), r.Float64()/float64(k)
				if spoil && r.IntN(k*k) == 0 {
					g.AO[j][c] = odd[r.IntN(len(odd))]
				}
			}
		}
		out[l] = g
	}
	return out
}

// The lower-graphs answer decodes to exactly what stepgraph.Cut makes of
// the K×K graphs (the cut a client makes of a K×K answer), in both forms,
// with and without a policy version; a body cut short anywhere, or with
// bytes after its end, is an error.
func TestLowerGraphsAreTheCut(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	v := int64(41)
	sums, pairs := 0, 0
	for _, pv := range []*int64{nil, &v} {
		var results [][]scorer.StepGraph
		for _, k := range []int{0, 1, 2, 3, 5, 8, 30} {
			results = append(results, randomStepGraphs(r, k, 1+r.IntN(6)))
		}
		results = append(results, nil) // a job with no layers
		b, err := protocol.AppendLowerGraphs(nil, pv, results)
		if err != nil {
			t.Fatal(err)
		}
		got, err := protocol.DecodeLowerGraphs(b)
		if err != nil {
			t.Fatal(err)
		}
		if (got.PolicyVersion == nil) != (pv == nil) || (pv != nil && *got.PolicyVersion != *pv) {
			t.Fatalf("policy version %v, want %v", got.PolicyVersion, pv)
		}
		if len(got.Results) != len(results) {
			t.Fatalf("%d jobs, want %d", len(got.Results), len(results))
		}
		for i, gs := range results {
			if len(got.Results[i]) != len(gs) {
				t.Fatalf("job %d: %d graphs, want %d", i, len(got.Results[i]), len(gs))
			}
			for l, g := range gs {
				want := stepgraph.Cut(g.Layer, g.AA, g.AO)
				if !scorertest.SameLower(got.Results[i][l], want) {
					t.Fatalf("job %d graph %d:\n got %+v\nwant %+v", i, l, got.Results[i][l], want)
				}
				if want.Summed() {
					sums++
				} else if want.K > 1 {
					pairs++
				}
			}
		}
		for n := 0; n < len(b); n++ {
			if _, err := protocol.DecodeLowerGraphs(b[:n]); err == nil {
				t.Fatalf("a lower-graphs body cut to %d of %d bytes decoded", n, len(b))
			}
		}
		if _, err := protocol.DecodeLowerGraphs(append(b, 0)); err == nil {
			t.Fatal("a body with a byte after its end decoded")
		}
	}
	if sums == 0 || pairs == 0 {
		t.Fatalf("%d graphs in the sum form and %d pairs: the test needs both", sums, pairs)
	}
}

// The lower-graphs answer is about a quarter of the binary K×K answer at
// the AttnSR benchmark's shape (six layers, 30 steps).
func TestLowerGraphsSize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gs := randomStepGraphs(r, 30, 6)
	for i := range gs { // masses only: every layer in the sum form
		for j := range gs[i].AO {
			for c := range gs[i].AO[j] {
				gs[i].AO[j][c] = r.Float64() / 30
			}
		}
	}
	low, err := protocol.AppendLowerGraphs(nil, nil, [][]scorer.StepGraph{gs})
	if err != nil {
		t.Fatal(err)
	}
	var wire protocol.WireJobResult
	for _, g := range gs {
		wire.Graphs = append(wire.Graphs, protocol.WireGraph{Layer: g.Layer, AA: g.AA, AO: g.AO})
	}
	full, err := protocol.AppendGraphs(nil, protocol.AttentionResponse{Results: []protocol.WireJobResult{wire}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 * (9 + 8*435); len(low) != 4+1+4+4+want {
		t.Fatalf("lower answer of six 30-step layers is %d bytes, want %d", len(low), 13+want)
	}
	if ratio := float64(len(low)) / float64(len(full)); ratio > 0.25 {
		t.Fatalf("lower answer %d bytes, K×K answer %d: ratio %.3f, want ≤ 0.25", len(low), len(full), ratio)
	}
}

// Malformed lower-graphs bodies are errors, never panics or allocations
// beyond the body's size.
func TestDecodeLowerGraphsRejectsMalformedBodies(t *testing.T) {
	head := func(k uint32, form byte) []byte {
		b := append([]byte(protocol.MagicLowerGraphs), 0)
		b = binary.LittleEndian.AppendUint32(b, 1) // one job
		b = binary.LittleEndian.AppendUint32(b, 1) // one graph
		b = binary.LittleEndian.AppendUint32(b, 7) // layer
		b = binary.LittleEndian.AppendUint32(b, k)
		return append(b, form)
	}
	for name, b := range map[string][]byte{
		"unknown form":      append(head(3, 2), make([]byte, 8*3)...),
		"sum form of K = 1": head(1, 1),
		"sum form of K = 0": head(0, 1),
		"huge K":            head(1<<31, 1),
		"largest K":         head(1<<32-1, 0),
		"K over the body":   append(head(4, 1), make([]byte, 8*5)...),
		"wrong magic":       append([]byte("CFG1"), head(2, 1)[4:]...),
		"unknown flag":      append(append([]byte(protocol.MagicLowerGraphs), 2), head(2, 1)[5:]...),
	} {
		if resp, err := protocol.DecodeLowerGraphs(b); err == nil {
			t.Errorf("%s: decoded to %+v", name, resp)
		}
	}
	if _, err := protocol.DecodeLowerGraphs(append(head(2, 1), make([]byte, 8)...)); err != nil {
		t.Errorf("a valid K = 2 sum graph: %v", err)
	}
	// Random mutations of a valid answer: errors or answers, no panic.
	r := rand.New(rand.NewPCG(5, 6))
	valid, err := protocol.AppendLowerGraphs(nil, nil, [][]scorer.StepGraph{randomStepGraphs(r, 4, 2), randomStepGraphs(r, 2, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), valid...)
		for m := 1 + r.IntN(3); m > 0; m-- {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		if resp, err := protocol.DecodeLowerGraphs(b); err == nil {
			for _, gs := range resp.Results {
				for _, g := range gs {
					n := stepgraph.Len(int(g.K))
					if (g.Summed() && len(g.Sum) != n) || (!g.Summed() && (len(g.AA) != n || len(g.AO) != n)) {
						t.Fatalf("mutated body decoded to a graph of K = %d with %d/%d/%d values", g.K, len(g.AA), len(g.AO), len(g.Sum))
					}
				}
			}
		}
	}
}

// The encoder refuses graphs that are not K×K, as the K×K form does.
func TestAppendLowerGraphsRejectsOtherShapes(t *testing.T) {
	sq := [][]float64{{0, 0}, {0.5, 0}}
	for name, g := range map[string]scorer.StepGraph{
		"jagged AO":     {AA: sq, AO: [][]float64{{1}, {0.2, 0.3}}},
		"AO of other K": {AA: sq, AO: [][]float64{{1}}},
		"AA not square": {AA: [][]float64{{1, 2, 3}, {4}}, AO: sq},
	} {
		if _, err := protocol.AppendLowerGraphs(nil, nil, [][]scorer.StepGraph{{g}}); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}
