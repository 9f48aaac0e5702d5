package stage_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// restartRun runs the advantage stage with cfg (and a fresh metrics
// registry) until until() holds, stops it the way SIGTERM does, and returns
// the registry.
func restartRun(t *testing.T, ctx context.Context, cfg stage.Config, prod *producers.Producer, until func() bool) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = stage.NewMetrics(reg)
	a, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	waitFor(t, "samples", until)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return reg
}

// statePartitionsUsed returns the state topic's partitions that hold at
// least one record.
func statePartitionsUsed(t *testing.T, brokers []string, topic string) map[int]int {
	t.Helper()
	used := map[int]int{}
	for p, recs := range readTopic(t, brokers, topic) {
		if len(recs) > 0 {
			used[p] = len(recs)
		}
	}
	return used
}

// TestAdvantageRestartMultiPartitionStateTopic runs the AttnSR advantage
// stage over 4 scored partitions with a 4-partition state topic (what a
// cluster's default gives when operators create the topics), restarting it
// twice: no partition may start over (creditflow_state_missing_total 0),
// no sample may be written twice, and every sample — each carries the EMA
// baseline R̄_t — must equal an uninterrupted run's byte for byte and
// `creditflow compute` on the same records.
func TestAdvantageRestartMultiPartitionStateTopic(t *testing.T) {
	const parts, stateParts = 4, 4
	e := newEnvState(t, parts, stateParts, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.Credit.Delta = 0.8 // a baseline that moves visibly from group to group
		cfg.CommitInterval = 50 * time.Millisecond
	}, "samples.restarted", "samples.straight")
	ctx, b, prod, base := e.ctx, e.b, e.prod, e.cfg

	// The defect this guards against shows only when snapshot keys hash
	// away from partition 0.
	homes := map[int]bool{}
	for p := 0; p < parts; p++ {
		homes[producers.PartitionFor([]byte(state.SnapshotKey("restarted.advantage", base.Topics.Scored, p)), stateParts)] = true
	}
	if len(homes) < 2 || (len(homes) == 1 && homes[0]) {
		t.Fatalf("the snapshot keys hash to state partitions %v: the test would not see a wrong partition", homes)
	}

	const groups, size = 40, 3
	recs := randomScored(groups, size, 11)
	thirds := []int{size * (groups / 3), size * (2 * groups / 3), len(recs)} // whole groups

	cfgA := base
	cfgA.GroupID, cfgA.Topics.Samples = "restarted", "samples.restarted"
	from := 0
	for i, upto := range thirds {
		produceScored(t, prod, base.Topics.Scored, recs[from:upto])
		from = upto
		n := upto
		reg := restartRun(t, ctx, cfgA, prod, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgA.Topics.Samples)) >= n })
		if i > 0 {
			if v := metricValue(t, reg, "creditflow_state_missing_total"); v != 0 {
				t.Fatalf("restart %d: %v partitions found no snapshot and started the EMA over", i, v)
			}
		}
	}
	if used := statePartitionsUsed(t, b.Addrs(), base.Topics.State); len(used) < 2 {
		t.Fatalf("snapshots landed in state partitions %v only: the test did not exercise several", used)
	}

	cfgB := base
	cfgB.GroupID, cfgB.Topics.Samples = "straight", "samples.straight"
	restartRun(t, ctx, cfgB, prod, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgB.Topics.Samples)) >= len(recs) })

	copies := keysOn(t, b.Addrs(), cfgA.Topics.Samples)
	for id, n := range copies {
		if n != 1 {
			t.Errorf("sample %s written %d times across graceful restarts", id, n)
		}
	}
	got := samplesByID(t, b.Addrs(), cfgA.Topics.Samples, len(recs))
	want := samplesByID(t, b.Addrs(), cfgB.Topics.Samples, len(recs))
	if len(got) != len(recs) || len(want) != len(recs) {
		t.Fatalf("restarted run has %d samples, uninterrupted %d, want %d", len(got), len(want), len(recs))
	}
	for id, w := range want {
		if !bytes.Equal(got[id], w) {
			t.Fatalf("sample %s differs after the restarts (a reset EMA baseline shows here)", id)
		}
	}
	if n := compareWithCompute(t, b.Addrs(), cfgA.Topics, base.Credit); n != len(recs) {
		t.Fatalf("compared %d samples, want %d", n, len(recs))
	}
}

// TestAdvantageStateTopicGrown restarts the advantage stage after
// partitions were added to its state topic: the snapshots written before
// lie where the old partition count put them, and must still be found.
func TestAdvantageStateTopicGrown(t *testing.T) {
	const parts = 4
	e := newEnvState(t, parts, 1, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.Credit.Delta = 0.8
		cfg.CommitInterval = 50 * time.Millisecond
	}, "samples.restarted", "samples.straight")
	ctx, b, prod, base := e.ctx, e.b, e.prod, e.cfg
	recs := randomScored(24, 3, 13)
	half := len(recs) / 2

	cfgA := base
	cfgA.GroupID, cfgA.Topics.Samples = "restarted", "samples.restarted"
	produceScored(t, prod, base.Topics.Scored, recs[:half])
	restartRun(t, ctx, cfgA, prod, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgA.Topics.Samples)) >= half })

	client := &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Timeout: 10 * time.Second}
	resp, err := client.CreatePartitions(ctx, &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: base.Topics.State, Count: 4}},
	})
	if err == nil {
		err = resp.Errors[base.Topics.State]
	}
	if err != nil {
		t.Fatalf("adding partitions to the state topic: %v", err)
	}
	if ps, err := consumers.Partitions(ctx, b.Addrs(), kafkasec.Config{}, base.Topics.State); err != nil || len(ps) != 4 {
		t.Fatalf("state topic partitions %v (%v), want 4", ps, err)
	}
	moved := 0
	for p := 0; p < parts; p++ {
		if producers.PartitionFor([]byte(state.SnapshotKey("restarted.advantage", base.Topics.Scored, p)), 4) != 0 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no snapshot key moves with 4 partitions: the test would not see a lost snapshot")
	}

	produceScored(t, prod, base.Topics.Scored, recs[half:])
	reg := restartRun(t, ctx, cfgA, prod, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgA.Topics.Samples)) >= len(recs) })
	if v := metricValue(t, reg, "creditflow_state_missing_total"); v != 0 {
		t.Fatalf("%v partitions started the EMA over after the state topic grew", v)
	}
	cfgB := base
	cfgB.GroupID, cfgB.Topics.Samples = "straight", "samples.straight"
	restartRun(t, ctx, cfgB, prod, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgB.Topics.Samples)) >= len(recs) })
	got := samplesByID(t, b.Addrs(), cfgA.Topics.Samples, len(recs))
	want := samplesByID(t, b.Addrs(), cfgB.Topics.Samples, len(recs))
	for id, w := range want {
		if !bytes.Equal(got[id], w) {
			t.Fatalf("sample %s differs after the state topic grew", id)
		}
	}
	for id, n := range keysOn(t, b.Addrs(), cfgA.Topics.Samples) {
		if n != 1 {
			t.Errorf("sample %s written %d times", id, n)
		}
	}
}
