package learn

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// drain finds published trajectories by the trajectory id inside the
// samples, which are keyed by prompt id (a group shares one key), including
// a sample written as chunks and one on the stale topic.
func TestDrainFindsSamplesByTrajectoryID(t *testing.T) {
	topics := stage.Topics{Samples: "learn.samples", SamplesStale: "learn.samples.stale"}
	b, err := broker.Start(broker.WithTopics(2, topics.Samples, topics.SamplesStale))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	msg := func(topic, id string, tokens int) producers.Message {
		s := &schemas.Sample{TrajectoryID: id, PromptID: "q1", GroupSize: 3, Method: "lapo", Output: "advantages",
			Tokens: make([]int32, tokens), LossMask: make([]uint8, tokens), Advantages: make([]float32, tokens)}
		v, err := schemas.Samples().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		return producers.Message{Topic: topic, Key: []byte(s.PromptID), Value: v}
	}
	msgs := []producers.Message{msg(topics.Samples, "q1-0", 4)}
	msgs = append(msgs, producers.Split(msg(topics.Samples, "q1-1", 4096), 4096)...) // 36 KB in chunks of 4 KiB
	msgs = append(msgs, msg(topics.SamplesStale, "q1-2", 4))
	if len(msgs) < 4 {
		t.Fatalf("%d messages: the long sample was not chunked", len(msgs))
	}
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	r := &run{o: Options{Topics: topics}, log: zerolog.Nop()}
	published := map[string]bool{"q1-0": true, "q1-1": true, "q1-2": true}
	found, stale, err := r.drain(ctx, b.Addrs(), published, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 3 || !found["q1-0"] || !found["q1-1"] || !found["q1-2"] || stale != 1 {
		t.Fatalf("found %v, %d stale; want the three trajectories, one stale", found, stale)
	}
}
