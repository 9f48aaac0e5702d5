package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// TestReplayJSONLReadsV1Records: scored records written with the v1 schema
// go through `creditflow replay --jsonl` and `creditflow compute`.
func TestReplayJSONLReadsV1Records(t *testing.T) {
	raw, err := os.ReadFile("../../schemas/testdata/v1/scored_lapo_groups.hex")
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "scored.v1"
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var msgs []producers.Message
	for _, line := range strings.Fields(string(raw)) {
		v, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte("k"), Value: v})
	}
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { out, _ := io.ReadAll(r); done <- out }()
	runErr := runReplay([]string{"--brokers", strings.Join(b.Addrs(), ","), "--topic-scored", topic, "--jsonl"})
	os.Stdout = stdout
	w.Close()
	out := <-done
	if runErr != nil {
		t.Fatalf("replay --jsonl: %v", runErr)
	}
	if n := bytes.Count(out, []byte("\n")); n != len(msgs) {
		t.Fatalf("replay --jsonl wrote %d lines for %d v1 records", n, len(msgs))
	}
	var res, diag bytes.Buffer
	if err := offline.Compute(bytes.NewReader(out), &res, &diag, credit.DefaultConfig()); err != nil {
		t.Fatalf("compute: %v (%s)", err, diag.String())
	}
	if n := bytes.Count(res.Bytes(), []byte("\n")); n != len(msgs) {
		t.Fatalf("compute wrote %d results for %d records (%s)", n, len(msgs), diag.String())
	}
	if schemas.SchemaOf(msgs[0].Value) != schemas.NameScored {
		t.Fatal("the golden record is not a scored record")
	}
}
