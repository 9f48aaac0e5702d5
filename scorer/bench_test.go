package scorer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkConcurrentCallers: 100 goroutines, each scoring its trajectories
// one set per call (the score stage's shape), through a real server on the
// tiny model. It reports sets/s with coalescing (default budget and wait),
// without it (one request per call), and straight on Local (no protocol),
// plus requests per set and the mean batch fill.
//
//	go test ./scorer/ -run XXX -bench ConcurrentCallers -benchtime 1x
func BenchmarkConcurrentCallers(b *testing.B) {
	const callers, perCaller = 100, 3
	sets := scorertest.MakeSets(99, callers*perCaller, 5)
	local := local.New(scorertest.Tiny())
	url, _ := scorertest.Serve(b, server.New(local))

	run := func(s scorer.Scorer) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < perCaller; k++ {
					i := c*perCaller + k
					if _, _, err := s.ScoreRows(context.Background(), sets[i:i+1]); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	reg := prometheus.NewRegistry()
	coalesced := newClient(b, []string{url}, client.WithRegisterer(reg))
	single := newClient(b, []string{url}, client.WithMaxWait(0), client.WithTokenBudget(1))
	var tc, ts, tl time.Duration
	for i := 0; i < b.N; i++ {
		tc += run(coalesced)
		ts += run(single)
		tl += run(local)
	}
	n := float64(b.N * len(sets))
	b.ReportMetric(n/tc.Seconds(), "sets/s-coalesced")
	b.ReportMetric(n/ts.Seconds(), "sets/s-uncoalesced")
	b.ReportMetric(n/tl.Seconds(), "sets/s-local")
	b.ReportMetric(ts.Seconds()/tc.Seconds(), "speedup-vs-uncoalesced")
	st := coalesced.Stats()
	b.ReportMetric(float64(st.Requests)/n, "requests/set")
	b.ReportMetric(float64(st.Requests)/tc.Seconds(), "requests/s")
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "creditflow_scorer_batch_fill_ratio" {
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "mean-fill")
		}
	}
}
