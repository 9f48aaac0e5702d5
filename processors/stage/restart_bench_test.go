package stage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// steadySnapshot is a partition's snapshot in the steady state: the closed
// groups it remembers (state.DefaultWindow().ClosedMemory of them, G = 5,
// search-QA-like ids) and a few acknowledged closes.
func steadySnapshot(partition int, next int64) []byte {
	s := state.Snapshot{Version: state.SnapshotVersion, Topic: "creditflow.scored", Partition: partition, NextOffset: next,
		EMA: state.EMAState{Value: 0.4375, Count: next / 5}, WatermarkMs: 1_767_225_600_000 + next*10}
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
// (docs/performance.md, "Restart cost"): on every partition assignment it
// reads the state topic's partition from its first offset to find the last
// snapshot of its key. The state topic holds one snapshot per input
// partition per commit interval (500 ms) while groups close; compaction
// (the topic is compacted) only ever cleans closed segments. The
// sub-benchmarks read a topic of n snapshots of two input partitions, as a
// restart after n/2 commit intervals without compaction would, and report
// the time to the snapshot and the bytes read.
func BenchmarkRestartSnapshotLoad(b *testing.B) {
	for _, n := range []int{2, 200, 800} {
		b.Run(fmt.Sprintf("snapshots=%d", n), func(b *testing.B) {
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
			for i := 0; i < n; i++ {
				p := i % 2
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
			b.ReportMetric(float64(el.Milliseconds()), "ms/load")
			b.ReportMetric(float64(bytes)/float64(n)/1e3, "KB/snapshot")
			b.ReportMetric(float64(bytes)/1e6, "MB/topic")
			b.ReportMetric(float64(bytes)/1e6/el.Seconds(), "MB/s")
		})
	}
}
