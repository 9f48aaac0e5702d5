package main

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
)

// topicRecords reads every record of topic (chunked ones assembled).
func topicRecords(t *testing.T, brokers []string, topic string) []consumers.Record {
	t.Helper()
	ctx := context.Background()
	parts, err := consumers.Partitions(ctx, brokers, kafkasec.Config{}, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []consumers.Record
	for _, p := range parts {
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, p, 0, func(raw consumers.Record) error {
			if r, _ := a.Add(raw); r != nil {
				out = append(out, *r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestReplayRescoresWithAnotherStatistic: a replay with --lapo-statistic
// entropy scores the live topic's logprob records again into
// <topic-samples>.scored, labelled backward:entropy, with every Δ equal to
// H(without) − H(with) computed offline on the model, and replays them into
// samples that carry those Δ; the live topics are left as they were.
func TestReplayRescoresWithAnotherStatistic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline on an embedded broker")
	}
	brokers := livePipeline(t)
	live := stage.DefaultTopics()
	before := topicEnds(t, brokers, live.Trajectories, live.Scored, live.Samples)
	out := "creditflow.samples.entropy"
	args := []string{"--brokers", strings.Join(brokers, ","), "--log-level", "error", "--topic-samples", out, "--lapo-statistic", "entropy"}
	stdout, err := captureStdout(t, func() error { return runReplay(args) })
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, "with the entropy statistic into "+out+".scored") {
		t.Fatalf("the replay does not say where the re-scored records went:\n%s", stdout)
	}
	if after := topicEnds(t, brokers, live.Trajectories, live.Scored, live.Samples); !equalEnds(before, after) {
		t.Fatalf("the replay changed the live topics: before %v after %v", before, after)
	}
	m := cpumodel.Tiny()
	cc := credit.DefaultConfig()
	deltas := map[string][]*float64{}
	checked := 0
	for _, r := range topicRecords(t, brokers, out+".scored") {
		s, err := schemas.ScoredRecords().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if s.Direction != "backward:entropy" {
			t.Fatalf("%s: re-scored record labelled %q", s.Trajectory.TrajectoryID, s.Direction)
		}
		rows, with, without, err := scoring.LAPORows(&s.Trajectory, stage.Backward, cc, m.Info().PlaceholderIDs)
		if err != nil {
			t.Fatal(err)
		}
		var h []float64
		if len(rows) > 0 {
			if h, _, err = m.ScoreRowsStatistic(rows, scorer.StatEntropy); err != nil {
				t.Fatal(err)
			}
		}
		for i, ts := range s.Turns {
			if with[i] < 0 {
				continue
			}
			want := h[without[i]] - h[with[i]]
			if ts.Delta == nil || math.Abs(*ts.Delta-want) > 1e-12 {
				t.Fatalf("%s turn %d: Δ %v, offline entropy Δ %v", s.Trajectory.TrajectoryID, i, ts.Delta, want)
			}
			checked++
		}
		ds := make([]*float64, len(s.Turns))
		for i := range s.Turns {
			ds[i] = s.Turns[i].Delta
		}
		deltas[s.Trajectory.TrajectoryID] = ds
	}
	if checked == 0 {
		t.Fatal("no eligible turn was re-scored")
	}
	samples := topicRecords(t, brokers, out)
	if len(samples) != 10 {
		t.Fatalf("%d samples, want 10", len(samples))
	}
	for _, r := range samples {
		s, err := schemas.Samples().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range s.Turns {
			if w := deltas[s.TrajectoryID][i]; d.Eligible && (d.Delta == nil || w == nil || *d.Delta != *w) {
				t.Fatalf("%s turn %d: sample Δ %v, re-scored Δ %v", s.TrajectoryID, i, d.Delta, w)
			}
		}
	}
	// --jsonl exports a topic as it is: with --lapo-statistic it is refused.
	if _, err := captureStdout(t, func() error {
		return runReplay([]string{"--brokers", strings.Join(brokers, ","), "--jsonl", "--lapo-statistic", "kl"})
	}); err == nil || !strings.Contains(err.Error(), "--jsonl") {
		t.Fatalf("--jsonl with --lapo-statistic: %v", err)
	}
}
