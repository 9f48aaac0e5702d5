package bench

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/creditflow/creditflow/producers"
)

// The overhead phase's watcher counts whole samples: a group written as
// chunks (as 128k-token samples are) is done at its last sample, and every
// sample counts once however many chunks carried it.
func TestWatcherCountsWholeSamples(t *testing.T) {
	ctx, b := testBroker(t)
	topic := "watched-samples"
	if err := producers.EnsureTopics(ctx, b.addrs, benchSec, producers.TopicSpec{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	w, err := watchGroups(ctx, b.addrs, topic, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	// 200 KB samples in batches of at most 64 KiB: four chunks each.
	prod, err := producers.New(producers.Config{Brokers: b.addrs, BatchBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	rng := rand.NewChaCha8([32]byte{})
	var msgs []producers.Message
	for i := 0; i < benchGroupSize; i++ {
		v := make([]byte, 200<<10)
		_, _ = rng.Read(v) // random: no codec shortens it below four chunks
		// keyed by prompt id, as the advantage stage writes samples
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte("p"), Value: v})
	}
	sent := time.Now()
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	for w.groups() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("the group was never done; %d samples seen", w.samples("p"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	done, ok := w.doneAt("p")
	if !ok || done.Before(sent) {
		t.Fatalf("done at %v (%v), sent at %v", done, ok, sent)
	}
	time.Sleep(500 * time.Millisecond) // any further chunk would be read by now
	if n := w.samples("p"); n != benchGroupSize {
		t.Fatalf("%d samples seen, want %d: chunks were counted as samples", n, benchGroupSize)
	}
}
