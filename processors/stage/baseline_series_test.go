package stage_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// baselineSeries counts the creditflow_attnsr_baseline series of reg.
func baselineSeries(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "creditflow_attnsr_baseline" {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// TestAttnSRBaselineSeriesLeaveWithThePartition: the advantage stage
// exports the EMA baseline of each partition it holds and deletes the
// series when the partition is released (here by stopping the stage, as
// a rebalance that moves it would), so a member does not keep reporting
// the baseline of a partition another member now owns.
func TestAttnSRBaselineSeriesLeaveWithThePartition(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Credit.Method, cfg.Credit.Output = credit.MethodAttnSR, credit.OutputGRPO
		cfg.Metrics = stage.NewMetrics(reg)
	})
	var msgs []producers.Message
	for _, b := range goldenHex(t, "v2", "scored_attnsr_groups") {
		s, err := schemas.ScoredRecords().Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, producers.Message{Topic: e.cfg.Topics.Scored, Key: []byte(s.Trajectory.PromptID), Value: b})
	}
	if err := e.prod.Produce(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	adv, err := stage.NewAdvantageStage(e.cfg, e.prod)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- adv.Run(ctx) }()
	waitFor(t, "the baseline series of the partition", func() bool { return baselineSeries(t, reg) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := baselineSeries(t, reg); n != 0 {
		t.Fatalf("%d baseline series after the partition was released, want 0", n)
	}
}
