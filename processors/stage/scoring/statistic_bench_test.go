package scoring

import (
	"context"
	"testing"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/vocab"
)

// BenchmarkStatistics measures the scorer's cost of one search-QA
// trajectory's LAPO set per statistic on the in-process tiny model
// (ms/set; docs/method.md §2.4): logprob shares prefixes, entropy and kl
// forward each row whole (kl two contexts per turn).
func BenchmarkStatistics(b *testing.B) {
	m := cpumodel.Tiny()
	sc := local.New(m)
	gen := synth.Default()
	cc := credit.DefaultConfig()
	var trajs []schemas.Trajectory
	for g := 0; len(trajs) < 20; g++ {
		trajs = append(trajs, gen.Group(g)...)
	}
	for _, stat := range vocab.Statistics {
		b.Run(string(stat), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				t := &trajs[i%len(trajs)]
				if _, err := GainsStatistic(context.Background(), sc, t, Backward, stat, cc, m.Info().PlaceholderIDs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/set")
		})
	}
}
