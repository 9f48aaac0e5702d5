package demo

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/schemas"
)

// TestDemoInterruptedLosesNothing: a demo stopped by the user (its context
// cancelled) after the first samples reports nothing lost: the trajectories
// not yet trained on are pending, the groups not yet produced are counted
// as such, and together with the samples they make up the whole run.
func TestDemoInterruptedLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Defaults()
	o.Groups, o.Bad, o.MaxAhead, o.Timeout = 12, 0, 1, 3*time.Minute
	o.Progress = func(p Progress) {
		if p.SamplesOut > 0 {
			cancel() // Ctrl-C
		}
	}
	s, err := Run(ctx, o)
	if err == nil {
		t.Fatalf("interrupted run returned no error: %+v", s)
	}
	if !s.Interrupted || s.Lost != 0 {
		t.Fatalf("interrupted run: interrupted %v, lost %d; want true, 0", s.Interrupted, s.Lost)
	}
	if s.NotProduced == 0 || s.SamplesOut+s.Pending+s.NotProduced != o.Groups*o.GroupSize {
		t.Fatalf("samples %d + pending %d + not produced %d, want %d with some never produced", s.SamplesOut, s.Pending, s.NotProduced, o.Groups*o.GroupSize)
	}
}

// TestDemoRewardSummary: the summary's reward mean and success rate are
// those of the samples on the samples topic.
func TestDemoRewardSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	b, err := broker.Start(broker.WithDefaultPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := Defaults()
	o.Brokers, o.Groups, o.Partitions, o.Bad, o.Timeout = b.Addrs(), 4, 2, 0, 3*time.Minute
	s, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	rewards := map[string]float64{}
	ctx := context.Background()
	for p := 0; p < 2; p++ {
		if _, err := consumers.ReadPartitionRange(ctx, b.Addrs(), kafkasec.Config{}, Topics("").Samples, p, 0, func(r consumers.Record) error {
			smp, err := schemas.Samples().Decode(r.Value)
			if err != nil {
				return err
			}
			rewards[smp.TrajectoryID] = smp.Reward
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sum, ok := 0.0, 0
	for _, r := range rewards {
		sum += r
		if r >= 1 {
			ok++
		}
	}
	n := float64(len(rewards))
	if len(rewards) != 20 || math.Abs(s.RewardMean-sum/n) > 1e-4 || math.Abs(s.SuccessRate-float64(ok)/n) > 1e-4 {
		t.Fatalf("summary reward mean %v, success rate %v; the %d samples on the topic: %v, %v", s.RewardMean, s.SuccessRate, len(rewards), sum/n, float64(ok)/n)
	}
	if ok == 0 || ok == len(rewards) {
		t.Fatalf("%d of %d samples succeed: the test would not see a wrong rate", ok, len(rewards))
	}
}

// samplesOf returns the samples on a demo's samples topic by trajectory id.
func samplesOf(t *testing.T, brokers []string, prefix string, parts int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for p := 0; p < parts; p++ {
		if _, err := consumers.ReadPartitionRange(context.Background(), brokers, kafkasec.Config{}, Topics(prefix).Samples, p, 0, func(r consumers.Record) error {
			s, err := schemas.Samples().Decode(r.Value)
			if err != nil {
				t.Fatalf("%s/%d offset %d: %v", r.Topic, r.Partition, r.Offset, err)
			}
			out[s.TrajectoryID] = r.Value
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestDemoEventTimeIsWallClock: the demo stamps its trajectories with the
// wall clock (so sample ages and event-time charts are real), and a second
// run given the first's start time (--start-ms) writes the same bytes.
func TestDemoEventTimeIsWallClock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	b, err := broker.Start(broker.WithDefaultPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := Defaults()
	o.Brokers, o.Groups, o.Partitions, o.Bad, o.Timeout, o.Prefix = b.Addrs(), 2, 2, 0, 3*time.Minute, "first"
	before := time.Now().UnixMilli()
	s, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	if s.StartMs < before || s.StartMs > after {
		t.Fatalf("start_ms %d outside the run's wall-clock span [%d, %d]", s.StartMs, before, after)
	}
	first := samplesOf(t, b.Addrs(), "first", 2)
	for id, v := range first {
		smp, err := schemas.Samples().Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if smp.CreatedAtMs < before || smp.CreatedAtMs > after {
			t.Fatalf("sample %s created_at_ms %d outside [%d, %d]", id, smp.CreatedAtMs, before, after)
		}
	}
	o.Prefix, o.StartMs = "second", s.StartMs
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	second := samplesOf(t, b.Addrs(), "second", 2)
	if len(first) != 10 || len(second) != len(first) {
		t.Fatalf("%d and %d samples, want 10 each", len(first), len(second))
	}
	for id, v := range first {
		if string(second[id]) != string(v) {
			t.Fatalf("sample %s differs between two runs with the same --start-ms", id)
		}
	}
}
