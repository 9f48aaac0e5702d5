package consumers_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// BenchmarkGroupConsume reports records/s through Group.Run (1 KB records,
// 4 partitions, commit every 100 records), and the same records read with
// ReadPartitionRange (no group) as the baseline in the same run.
func BenchmarkGroupConsume(b *testing.B) {
	brokers := brokertest.Start(b, broker.WithTopics(4, "bench")).Addrs()
	p := newProducer(b, brokers)
	n := b.N * 1000
	for i := 0; i < n; i += 1000 {
		msgs := make([]producers.Message, 1000)
		for j := range msgs {
			msgs[j] = producers.Message{Topic: "bench", Key: []byte(strconv.Itoa(i + j)), Value: make([]byte, 1024)}
		}
		if err := p.Produce(context.Background(), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: "bench", Topics: []string{"bench"}, Buffer: 1024})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			for r := range cl.Records {
				if got.Add(1) == int64(n) {
					cancel()
				}
				if (r.Offset+1)%100 == 0 {
					_ = commit(ctx, r.Offset+1)
				}
			}
			return nil
		})
	}()
	<-done
	groupRate := float64(n) / time.Since(start).Seconds()
	b.StopTimer()
	start = time.Now()
	read := 0
	for part := 0; part < 4; part++ {
		if _, err := consumers.ReadPartitionRange(context.Background(), brokers, kafkasecZero, "bench", part, -2,
			func(consumers.Record) error { read++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	rangeRate := float64(read) / time.Since(start).Seconds()
	b.ReportMetric(groupRate, "records/s")
	b.ReportMetric(rangeRate, "range-records/s")
}

var kafkasecZero = kafkasec.Config{}
