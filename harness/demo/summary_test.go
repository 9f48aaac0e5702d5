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

// TestDemoEventTimeIsWallClock: without a start time the demo stamps each
// trajectory with the wall clock when it is published (so sample ages and
// event-time charts are real; a group the producer held back behind
// --max-ahead is stamped when it goes out, not at start + i × 10 ms), and
// two runs given the same start time (--start-ms) write the same bytes.
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
	o.Brokers, o.Groups, o.Partitions, o.Bad, o.Timeout, o.Prefix = b.Addrs(), 6, 2, 0, 3*time.Minute, "first"
	o.MaxAhead = 0 // each group waits for the one before: publish times spread over the run
	before := time.Now().UnixMilli()
	s, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	if s.StartMs < before || s.StartMs > after || !s.WallClock {
		t.Fatalf("start_ms %d outside the run's wall-clock span [%d, %d], wall clock %v", s.StartMs, before, after, s.WallClock)
	}
	n, spread := 0, int64(0)
	for p := 0; p < 2; p++ {
		if _, err := consumers.ReadPartitionRange(context.Background(), b.Addrs(), kafkasec.Config{}, Topics("first").Trajectories, p, 0, func(r consumers.Record) error {
			tr, err := schemas.Trajectories().Decode(r.Value)
			if err != nil {
				return err
			}
			n++
			spread = max(spread, tr.CreatedAtMs-s.StartMs)
			if d := r.Time.UnixMilli() - tr.CreatedAtMs; d < -50 || d > 2000 { // a stamp at start + i × 10 ms is seconds off for the later groups
				t.Errorf("%s: created_at_ms %d, published at %d (%+d ms): not the wall clock at publish time",
					tr.TrajectoryID, tr.CreatedAtMs, r.Time.UnixMilli(), d)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n != 30 {
		t.Fatalf("%d trajectories on the topic, want 30", n)
	}
	t.Logf("event times span %d ms over a %d ms run", spread, after-before)

	o.Groups, o.MaxAhead, o.StartMs = 2, Defaults().MaxAhead, s.StartMs
	var runs []map[string][]byte
	for _, prefix := range []string{"second", "third"} {
		o.Prefix = prefix
		r, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if r.StartMs != s.StartMs || r.WallClock {
			t.Fatalf("--start-ms %d run: start_ms %d, wall clock %v", s.StartMs, r.StartMs, r.WallClock)
		}
		runs = append(runs, samplesOf(t, b.Addrs(), prefix, 2))
	}
	if len(runs[0]) != 10 || len(runs[1]) != len(runs[0]) {
		t.Fatalf("%d and %d samples, want 10 each", len(runs[0]), len(runs[1]))
	}
	for id, v := range runs[0] {
		if string(runs[1][id]) != string(v) {
			t.Fatalf("sample %s differs between two runs with the same --start-ms", id)
		}
		smp, err := schemas.Samples().Decode(v)
		if err != nil {
			t.Fatal(err)
		}
		if smp.CreatedAtMs < s.StartMs || smp.CreatedAtMs >= s.StartMs+100 {
			t.Fatalf("sample %s of a --start-ms %d run: created_at_ms %d, want start + i × 10 ms", id, s.StartMs, smp.CreatedAtMs)
		}
	}
}
