package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
)

// TestDemoCommandJSON runs `creditflow demo --json` as a user would and reads
// the last line of its output.
func TestDemoCommandJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := runDemo([]string{"--groups", "2", "--bad", "1", "--json", "--log-level", "error"})
	os.Stdout = stdout
	w.Close()
	raw, _ := io.ReadAll(r) // the summary is far below the pipe's buffer
	out := string(raw)
	if runErr != nil {
		t.Fatalf("demo: %v\n%s", runErr, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var sum struct {
		GroupsIn    int     `json:"groups_in"`
		GroupsOut   int     `json:"groups_out"`
		SamplesOut  int     `json:"samples_out"`
		DeadLetters int     `json:"dead_letters"`
		Lost        int     `json:"lost"`
		Seconds     float64 `json:"seconds"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("last line is not the JSON summary: %v\n%s", err, out)
	}
	if sum.GroupsIn != 2 || sum.GroupsOut != 2 || sum.SamplesOut != 10 || sum.DeadLetters != 1 || sum.Lost != 0 || sum.Seconds <= 0 {
		t.Fatalf("summary %+v", sum)
	}
}

// TestDemoOnSharedBrokersKeepsOffLiveTopics: `demo --brokers` on a cluster
// that already has the live creditflow.* topics writes to its own
// creditflow-demo-<time>.* topics and leaves the live ones as they were.
func TestDemoOnSharedBrokersKeepsOffLiveTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	b := brokertest.Start(t)
	live := stage.DefaultTopics()
	cfg := stage.DefaultConfig()
	if err := producers.EnsureTopics(context.Background(), b.Addrs(), kafkasec.Config{}, cfg.TopicSpecs(2)...); err != nil {
		t.Fatal(err)
	}
	names := []string{live.Trajectories, live.Scored, live.Samples, live.DeadLetters, live.State}
	before := topicEnds(t, b.Addrs(), names...)
	out, err := captureStdout(t, func() error {
		return runDemo([]string{"--brokers", strings.Join(b.Addrs(), ","), "--groups", "1", "--bad", "1", "--json", "--timeout", "2m"})
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if after := topicEnds(t, b.Addrs(), names...); !equalEnds(before, after) {
		t.Errorf("demo --brokers wrote into the live topics: %v, before %v", after, before)
	}
}

// TestDemoOnFreshBrokersUsesStandardTopics: on a cluster with none of the
// creditflow topics, `demo --brokers` writes the standard ones, so that
// `creditflow monitor --brokers …` (and run, replay) find its samples
// without further flags.
func TestDemoOnFreshBrokersUsesStandardTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	b := brokertest.Start(t)
	out, err := captureStdout(t, func() error {
		return runDemo([]string{"--brokers", strings.Join(b.Addrs(), ","), "--groups", "2", "--bad", "0", "--json", "--timeout", "2m"})
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	var n int64
	for _, e := range topicEnds(t, b.Addrs(), stage.DefaultTopics().Samples)[stage.DefaultTopics().Samples] {
		n += e
	}
	if n < 10 { // 2 groups of 5; at-least-once may add duplicates
		t.Fatalf("%d records in %s after a 10-sample demo", n, stage.DefaultTopics().Samples)
	}
}
