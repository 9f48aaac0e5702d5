package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/processors/stage"
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

// TestDemoOnSharedBrokersKeepsOffLiveTopics: `demo --brokers` writes to
// its own creditflow-demo-<time>.* topics, never to the live creditflow.*
// topics of that cluster.
func TestDemoOnSharedBrokersKeepsOffLiveTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	b, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out, err := captureStdout(t, func() error {
		return runDemo([]string{"--brokers", strings.Join(b.Addrs(), ","), "--groups", "1", "--bad", "1", "--json", "--timeout", "2m"})
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	live := stage.DefaultTopics()
	ends := topicEnds(t, b.Addrs(), live.Trajectories, live.Scored, live.Samples, live.DeadLetters, live.State)
	for tp, e := range ends {
		if e != nil {
			t.Errorf("demo --brokers created the live topic %s", tp)
		}
	}
}
