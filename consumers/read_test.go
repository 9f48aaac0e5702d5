package consumers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// TestLastMatchReadsBackwards checks LastMatch against a forward read of the
// whole partition: the same newest record for every key, and a key written
// near the end found after reading only the records written after it (one
// window), not the partition.
func TestLastMatchReadsBackwards(t *testing.T) {
	brokers := brokertest.Start(t, broker.WithTopics(1, "log")).Addrs()
	p := newProducer(t, brokers)
	ctx := context.Background()
	const n = 500
	var msgs []producers.Message
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("k%d", i%7)
		switch {
		case i == 3:
			k = "early" // only near the start
		case i == n-5:
			k = "late" // only near the end
		}
		msgs = append(msgs, producers.Message{Topic: "log", Key: []byte(k), Value: []byte(fmt.Sprintf("%s:%d", k, i))})
	}
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, "log", 0, 0, func(r consumers.Record) error {
		want[string(r.Key)] = string(r.Value)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, window := range []int64{1, 16, 1000} {
		for k, v := range want {
			got, ok, read, err := consumers.LastMatch(ctx, brokers, kafkasec.Config{}, "log", 0, window, func(r consumers.Record) bool { return string(r.Key) == k })
			if err != nil || !ok || string(got.Value) != v {
				t.Fatalf("window %d key %s: got %q found=%v err=%v, want %q", window, k, got.Value, ok, err, v)
			}
			if read > n {
				t.Fatalf("window %d key %s: read %d records of %d", window, k, read, n)
			}
		}
	}
	_, _, read, err := consumers.LastMatch(ctx, brokers, kafkasec.Config{}, "log", 0, 16, func(r consumers.Record) bool { return string(r.Key) == "late" })
	if err != nil || read != 16 {
		t.Fatalf("late key: read %d records (err %v), want one window of 16", read, err)
	}
	_, ok, read, err := consumers.LastMatch(ctx, brokers, kafkasec.Config{}, "log", 0, 16, func(r consumers.Record) bool { return string(r.Key) == "absent" })
	if err != nil || ok || read != n {
		t.Fatalf("absent key: found=%v read %d (err %v), want not found after reading all %d", ok, read, err, n)
	}
}
