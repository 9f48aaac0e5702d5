// Package replay re-runs the advantage stage over a scored topic — the
// expensive scorer results — with new settings into new topics, and reads a
// scored topic back: as compute input lines, or re-scored with another LAPO
// statistic (docs/offline.md, docs/method.md §2.4). `creditflow replay` is
// its command.
//
// Guarantees: a replay never writes into a live topic, and its outputs are
// distinct and (unless appended to) empty (CheckOutputs, before anything
// is written); it stops once it has caught up with the scored topic's end
// offsets as of its start.
package replay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// OutputTopics are the topics a replay of a scored topic with partitions
// partitions writes: samples, dead letters, state and (with
// --max-policy-lag) stale samples, and rescoreTo when it re-scores; with
// the settings `run --create-topics` gives them (stage.Config.TopicSpecs:
// retention, compaction for the state topic, max.message.bytes,
// min.insync.replicas), the state topic with as many partitions as the
// scored topic.
func OutputTopics(cfg stage.Config, partitions int, rescoreTo string) []producers.TopicSpec {
	specs := []producers.TopicSpec{
		cfg.DataTopicSpec(cfg.Topics.Samples, partitions),
		cfg.DeadLetterTopicSpec(cfg.Topics.DeadLetters),
		cfg.StateTopicSpec(cfg.Topics.State, partitions),
	}
	if cfg.MaxPolicyLag >= 0 {
		specs = append(specs, cfg.DataTopicSpec(cfg.Topics.SamplesStale, partitions))
	}
	if rescoreTo != "" {
		specs = append(specs, cfg.DataTopicSpec(rescoreTo, partitions))
	}
	return specs
}

// Result is what a replay did.
type Result struct {
	Records    int64   // scored records read, up to the ends
	OpenGroups int     // groups still open at the end of the topic
	Seconds    float64 // from the start of the advantage stage to caught up
}

// Run runs the advantage stage of cfg (writing with prod) until it has
// read every partition of cfg.Topics.Scored up to ends and has nothing in
// flight, or ctx ends.
func Run(ctx context.Context, cfg stage.Config, prod *producers.Producer, ends map[int]int64) (Result, error) {
	a, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for caughtUp := false; !caughtUp; {
		select {
		case err := <-done:
			cancel()
			return Result{}, err
		case <-ctx.Done():
			cancel()
			<-done
			return Result{}, ctx.Err()
		case <-tick.C:
			pos := a.Positions()
			caughtUp = true
			for p, end := range ends {
				if pos[p].Next < end || pos[p].InFlight > 0 {
					caughtUp = false
				}
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		return Result{}, err
	}
	open := 0
	var records int64
	for p, pos := range a.Positions() {
		open += pos.OpenGroups
		records += min(pos.Next, ends[p])
	}
	return Result{Records: records, OpenGroups: open, Seconds: time.Since(start).Seconds()}, nil
}

// CheckOutputs refuses outputs that would touch a live pipeline: a
// replay never writes to the live topics (the default topic names and the
// scored topic it reads), its outputs (samples, state, dead letters and,
// with --max-policy-lag, stale samples; with --lapo-statistic, the
// re-scored records rescoreTo) are distinct, and, unless
// appendOK, each output topic is new or empty. It runs before anything is
// written and creates no topic.
func CheckOutputs(ctx context.Context, cfg stage.Config, rescoreTo string, appendOK bool) error {
	live := stage.DefaultTopics()
	liveNames := map[string]string{
		live.Trajectories: "the live trajectories topic", live.Scored: "the live scored topic",
		live.Samples: "the live samples topic", live.DeadLetters: "the live dead-letter topic", live.State: "the live state topic",
	}
	if live.SamplesStale != "" {
		liveNames[live.SamplesStale] = "the live stale-samples topic"
	}
	if live.Policy != "" {
		liveNames[live.Policy] = "the policy topic"
	}
	liveNames[cfg.Topics.Scored] = "the scored topic this replay reads"
	outs := []struct{ flag, topic string }{
		{"--topic-samples", cfg.Topics.Samples}, {"--topic-state", cfg.Topics.State}, {"--topic-dead-letters", cfg.Topics.DeadLetters},
	}
	if cfg.MaxPolicyLag >= 0 {
		outs = append(outs, struct{ flag, topic string }{"--topic-samples-stale", cfg.Topics.SamplesStale})
	}
	if rescoreTo != "" {
		outs = append(outs, struct{ flag, topic string }{"--lapo-statistic (<topic-samples>.scored)", rescoreTo})
	}
	seen := map[string]string{}
	for _, o := range outs {
		if what, ok := liveNames[o.topic]; ok {
			return fmt.Errorf("%s %s is %s: a replay never writes into a live topic; write to a new topic, e.g. --topic-samples %s.replay-1",
				o.flag, o.topic, what, live.Samples)
		}
		if other, ok := seen[o.topic]; ok {
			return fmt.Errorf("%s and %s both name %s: give the replay's outputs distinct topics", other, o.flag, o.topic)
		}
		seen[o.topic] = o.flag
	}
	if appendOK {
		return nil
	}
	for _, o := range outs {
		ends, err := consumers.TopicEnds(ctx, cfg.Brokers, cfg.Security, o.topic)
		if err != nil {
			return err
		}
		var n int64
		for _, e := range ends {
			n += e
		}
		if n > 0 {
			return fmt.Errorf("%s %s already holds records (end offsets sum to %d): a replay writes to a new topic; pick a new name, or pass --append to add to it",
				o.flag, o.topic, n)
		}
	}
	return nil
}

// ExportJSONL writes every scored record up to ends to out, each as a
// compute input line (docs/offline.md).
func ExportJSONL(ctx context.Context, cfg stage.Config, ends map[int]int64, out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	for p := 0; p < len(ends); p++ {
		err := EachScored(ctx, cfg, p, ends[p], func(_ consumers.Record, s *schemas.Scored) error {
			b, err := json.Marshal(stage.ComputeInput(s))
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// EachScored calls fn with every scored record of partition p of
// cfg.Topics.Scored below offset end, put back together where it was
// written as chunks and decoded; broken chunks and undecodable records are
// reported on stderr and skipped.
func EachScored(ctx context.Context, cfg stage.Config, p int, end int64, fn func(rec consumers.Record, s *schemas.Scored) error) error {
	asm := consumers.NewAssembler(consumers.ReassemblyConfig{})
	_, err := consumers.ReadPartitionRange(ctx, cfg.Brokers, cfg.Security, cfg.Topics.Scored, p, 0, func(raw consumers.Record) error {
		if raw.Offset >= end {
			return nil
		}
		rec, broken := asm.Add(raw)
		for _, b := range broken {
			fmt.Fprintf(os.Stderr, "partition %d offset %d: %s: %s (skipped)\n", p, b.Offset, b.Reason, b.Detail)
		}
		if rec == nil {
			return nil
		}
		s, err := schemas.ScoredRecords().Decode(rec.Value)
		if err != nil {
			fmt.Fprintf(os.Stderr, "partition %d offset %d: %v (skipped)\n", p, rec.Offset, err)
			return nil
		}
		return fn(*rec, s)
	})
	return err
}
