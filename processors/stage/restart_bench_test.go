package stage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// steadySnapshot is a partition's snapshot in the steady state: the closed
// groups it remembers (state.DefaultWindow().ClosedMemory of them, G = 5,
// search-QA-like ids) and a few acknowledged closes.
func steadySnapshot(partition int, next int64) []byte {
	s := state.Snapshot{Version: state.SnapshotVersion, Topic: "creditflow.scored", Partition: partition, NextOffset: next,
		EMA: credit.EMA{Value: 0.4375, Count: next / 5}, WatermarkMs: 1_767_225_600_000 + next*10}
	for g := int64(0); g < int64(state.DefaultWindow().ClosedMemory); g++ {
		pid := fmt.Sprintf("q%09d", next/5-g)
		c := state.ClosedGroup{PromptID: pid}
		for i := 0; i < 5; i++ {
			c.Members = append(c.Members, fmt.Sprintf("%s-%d", pid, i))
		}
		s.Closed = append(s.Closed, c)
	}
	b, err := s.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkRestartSnapshotLoad is the restart cost of the advantage stage
// (docs/performance-passes.md, "Restart cost"): on every partition assignment it
// looks for the last snapshot of its key on the state topic, reading its
// state partition backwards from the end. The state topic holds one snapshot
// per input partition per commit interval (500 ms) while groups close;
// compaction (the topic is compacted) only ever cleans closed segments. The
// busy sub-benchmarks hold n snapshots of two busy input partitions, as a
// restart after n/2 commit intervals without compaction would; the idle ones
// hold the key's snapshot followed by n snapshots of another partition (the
// key's input partition idle meanwhile: an idle partition writes its
// snapshot again every snapshotRefresh, so n = 120 is a minute of a busy
// neighbour, the most that can follow it). Each reports the time to the
// snapshot and the size of the topic.
func BenchmarkRestartSnapshotLoad(b *testing.B) {
	for _, c := range []struct {
		n    int
		idle bool
	}{{2, false}, {200, false}, {800, false}, {120, true}, {800, true}} {
		name := fmt.Sprintf("busy/snapshots=%d", c.n)
		if c.idle {
			name = fmt.Sprintf("idle/after=%d", c.n)
		}
		n := c.n
		b.Run(name, func(b *testing.B) {
			br, err := broker.Start(broker.WithDefaultPartitions(1))
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			ctx := context.Background()
			cfg := DefaultConfig()
			cfg.Brokers = br.Addrs()
			cfg.Topics.State = "bench.state"
			if err := producers.EnsureTopics(ctx, br.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: cfg.Topics.State, Partitions: 1, ReplicationFactor: 1, Compact: true}); err != nil {
				b.Fatal(err)
			}
			prod, err := producers.New(producers.Config{Brokers: br.Addrs()})
			if err != nil {
				b.Fatal(err)
			}
			defer prod.Close()
			bytes := 0
			if c.idle {
				n++
			}
			for i := 0; i < n; i++ {
				p := i % 2
				if c.idle {
					p = min(i, 1) // key 0 once, then key 1
				}
				v := steadySnapshot(p, int64(100_000+i*500))
				bytes += len(v)
				if err := prod.Produce(ctx, producers.Message{Topic: cfg.Topics.State, Key: []byte(state.SnapshotKey("g", "creditflow.scored", p)), Value: v}); err != nil {
					b.Fatal(err)
				}
			}
			a := &AdvantageStage{cfg: cfg}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				snap, err := a.loadSnapshot(ctx, state.SnapshotKey("g", "creditflow.scored", 0))
				if err != nil || snap == nil {
					b.Fatal(err, snap == nil)
				}
			}
			el := time.Since(start) / time.Duration(b.N)
			b.StopTimer()
			// The baseline in the same run: reading the partition from its first
			// offset, as every assignment did before the backward read.
			fullStart := time.Now()
			if _, err := consumers.ReadPartitionRange(ctx, cfg.Brokers, kafkasec.Config{}, cfg.Topics.State, 0, 0, func(consumers.Record) error { return nil }); err != nil {
				b.Fatal(err)
			}
			full := time.Since(fullStart)
			b.ReportMetric(float64(el.Milliseconds()), "ms/load")
			b.ReportMetric(float64(full.Milliseconds()), "ms/full-read")
			b.ReportMetric(full.Seconds()/el.Seconds(), "speedup")
			b.ReportMetric(float64(bytes)/1e6, "MB/topic")
		})
	}
}
