package python_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// TestSamePartitionFromGoAndPython: the same key lands on the same partition whether
// kafka-go (package producers) or RolloutPublisher (librdkafka, murmur2_random) writes it,
// so a group never splits when Go and Python producers share a topic.
func TestSamePartitionFromGoAndPython(t *testing.T) {
	py := projectPython(t)
	const topic, parts, n = "creditflow.trajectories", 7, 300
	b, err := broker.Start(broker.WithTopics(parts, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	brokers := b.Addrs()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("prompt-%d-%x", i, i*7919)
	}
	// every tail length of murmur2, and UTF-8 (no empty key: prompt ids are never empty, and
	// kafka-go partitions an empty key at random)
	keys = append(keys, "a", "ab", "abc", "übung")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := producers.New(producers.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []producers.Message
	for _, k := range keys {
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte(k), Value: []byte("go")})
	}
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	p.Close()

	keyFile := filepath.Join(t.TempDir(), "keys.json")
	kb, _ := json.Marshal(keys)
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `import json, sys, creditflow
keys = json.load(open(sys.argv[2]))
pub = creditflow.RolloutPublisher(sys.argv[1])
for k in keys:
    pub.publish_raw(k.encode(), b"py")
pub.flush(30)
print(json.dumps([pub.partition_for(k.encode(), 7) for k in keys]))`
	out := runPy(t, py, 90*time.Second, "-c", script, strings.Join(brokers, ","), keyFile)
	var pyPredicted []int
	if err := json.Unmarshal(lastLine(out), &pyPredicted); err != nil {
		t.Fatal(err)
	}

	goPart, pyPart := map[string]int{}, map[string]int{}
	used := map[int]bool{}
	for part := 0; part < parts; part++ {
		if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, part, 0, func(r consumers.Record) error {
			switch string(r.Value) {
			case "go":
				goPart[string(r.Key)] = part
			case "py":
				pyPart[string(r.Key)] = part
			}
			used[part] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(goPart) != len(keys) || len(pyPart) != len(keys) {
		t.Fatalf("read back %d Go and %d Python records, want %d each", len(goPart), len(pyPart), len(keys))
	}
	for i, k := range keys {
		if goPart[k] != pyPart[k] {
			t.Errorf("key %q: kafka-go wrote partition %d, RolloutPublisher %d", k, goPart[k], pyPart[k])
		}
		if want := producers.PartitionFor([]byte(k), parts); goPart[k] != want || pyPredicted[i] != want {
			t.Errorf("key %q: partition %d (Go) / %d (creditflow.murmur2), PartitionFor says %d", k, goPart[k], pyPredicted[i], want)
		}
	}
	if len(used) < parts {
		t.Errorf("%d keys used only %d of %d partitions", len(keys), len(used), parts)
	}
}
