package pod_test

import (
	"context"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// testStatistics compares the pod's entropy and kl statistics with the Go
// reference scorer on the same checkpoint, over full and compact sets mixed
// with logprob sets in one call, and checks that an invalid kl set is a
// rejection.
func testStatistics(t *testing.T, p *pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ref := local.New(cpumodel.Tiny(), local.WithPolicyVersion(3))
	c := newClient(t, p.url)
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.HasFeature(protocol.FeatureStatistics) {
		t.Fatalf("pod info features %v lack %s", info.Features, protocol.FeatureStatistics)
	}
	r := rand.New(rand.NewSource(17))
	base := searchSets(r, 4, 256, cpumodel.TinyDelete)
	var sets []scorer.RowSet
	for i, s := range base {
		sets = append(sets, s) // logprob
		h := scorer.RowSet{ID: s.ID + "-entropy", Statistic: scorer.StatEntropy, Rows: append([]scorer.Row(nil), s.Rows...)}
		kl := scorer.RowSet{ID: s.ID + "-kl", Statistic: scorer.StatKL}
		for j, row := range s.Rows[1:] {
			full := s.Rows[0]
			full.ReferenceContext = row.Context
			full.Temperature = []float64{0, 0.7, 1.3}[(i+j)%3]
			kl.Rows = append(kl.Rows, full)
		}
		if i%2 == 1 {
			h = scorertest.CompactOf(h)
			h.Statistic = scorer.StatEntropy
			kc := scorertest.CompactOf(kl)
			kc.Statistic = scorer.StatKL
			for j := range kc.Rows {
				kc.Rows[j].ReferenceContext = kl.Rows[j].ReferenceContext
			}
			kl = kc
		}
		sets = append(sets, h, kl)
	}
	checkScores(t, ctx, c, ref, sets, "statistics (entropy, kl, logprob)")

	bad := []scorer.RowSet{{ID: "bad", Statistic: scorer.StatKL, Rows: []scorer.Row{{Context: []int32{1, 2}, Target: []int32{3, 4}, Span: [2]int{0, 2}, ReferenceContext: []int32{1, 999}}}}}
	var rej *scorer.RejectedError
	if _, _, err := c.ScoreRows(ctx, bad); !errors.As(err, &rej) {
		t.Errorf("kl row with a reference token outside the vocabulary: got %v, want a RejectedError", err)
	}
}
