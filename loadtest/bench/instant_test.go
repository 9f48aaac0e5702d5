package bench

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// The instant scorer's graphs are what the bench relies on them to be:
// deterministic per job and different between jobs, masses in [0, 1] that
// the scorer may send as sums (as real graphs are sent), and as
// incompressible as a real model's attention.
func TestInstantScorerGraphs(t *testing.T) {
	s := newBenchInstantScorer()
	jobs := instantJobs(8)
	res, err := s.Attention(context.Background(), jobs, scorer.AttentionOptions{})
	if err != nil || res.PolicyVersion != -1 {
		t.Fatalf("policy version %d (%v), want -1: the fixture has no policy", res.PolicyVersion, err)
	}
	a, b := res.Graphs, stepGraphs(jobs[:1])
	for l := range a[0] {
		for j := range a[0][l].AA {
			for c := range a[0][l].AA[j] {
				if math.Float64bits(a[0][l].AA[j][c]) != math.Float64bits(b[0][l].AA[j][c]) {
					t.Fatalf("job 0 layer %d [%d,%d]: %v then %v", l, j, c, a[0][l].AA[j][c], b[0][l].AA[j][c])
				}
			}
		}
	}
	if a[0][0].AA[5][2] == a[1][0].AA[5][2] || a[0][0].AA[5][2] == a[0][1].AA[5][2] {
		t.Fatalf("jobs 0 and 1, layers 0 and 1 share an entry: %v %v %v", a[0][0].AA[5][2], a[1][0].AA[5][2], a[0][1].AA[5][2])
	}
	for i, gs := range a {
		if len(gs) != 6 {
			t.Fatalf("job %d: %d graphs", i, len(gs))
		}
		for l, g := range gs {
			if g.Layer != jobs[i].Layers[l] || len(g.AA) != 30 || len(g.AO) != 30 {
				t.Fatalf("job %d graph %d: layer %d, %d×%d", i, l, g.Layer, len(g.AA), len(g.AO))
			}
			for j := range g.AA {
				if len(g.AA[j]) != 30 || len(g.AO[j]) != 30 {
					t.Fatalf("job %d graph %d row %d: %d and %d columns", i, l, j, len(g.AA[j]), len(g.AO[j]))
				}
				for c := range g.AA[j] {
					aa, ao := g.AA[j][c], g.AO[j][c]
					if c >= j && (aa != 0 || ao != 0) {
						t.Fatalf("job %d graph %d [%d,%d] = %v, %v on or above the diagonal", i, l, j, c, aa, ao)
					}
					if c < j && !(aa > 0 && aa <= 1 && ao > 0 && ao <= 1) {
						t.Fatalf("job %d graph %d [%d,%d] = %v, %v", i, l, j, c, aa, ao)
					}
				}
				if !stepgraph.SumExact(g.AA[j][:j], g.AO[j][:j]) {
					t.Fatalf("job %d graph %d row %d cannot be sent as sums", i, l, j)
				}
			}
		}
	}
	body, err := protocol.AppendLowerGraphs(nil, nil, a)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, lz4.CompressBlockBound(len(body)))
	n, err := lz4.CompressBlock(body, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		n = len(body) // lz4 stores it as it is
	}
	if r := float64(n) / float64(len(body)); r < 0.9 {
		t.Fatalf("the graphs answer compresses to %.2f of its %d bytes; real attention does not compress", r, len(body))
	}
}

// What the instant scorer's graphs cost per 30-step, six-layer job (CPU the
// bench's score phase shares with the stage).
func BenchmarkInstantScorerAttention(b *testing.B) {
	s := newBenchInstantScorer()
	jobs := instantJobs(16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Attention(context.Background(), jobs, scorer.AttentionOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(jobs)), "µs/job")
}

// instantJobs are n attnsr-k30-shaped jobs (30 steps, 1,196 tokens, six
// layers), five to a prompt.
func instantJobs(n int) []scorer.AttentionJob {
	jobs := make([]scorer.AttentionJob, n)
	for i := range jobs {
		jobs[i] = scorer.AttentionJob{ID: fmt.Sprintf("p%d-%d", i/5, i%5), Tokens: make([]int32, 1196),
			Steps: make([]scorer.Step, 30), Layers: []int{8, 10, 12, 14, 16, 18}}
	}
	return jobs
}
