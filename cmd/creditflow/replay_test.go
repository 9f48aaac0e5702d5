package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
)

// livePipeline runs the demo pipeline against an embedded broker so that
// the live topics hold real records, and returns the broker's addresses.
func livePipeline(t *testing.T) []string {
	t.Helper()
	b := brokertest.Start(t, broker.WithDefaultPartitions(2))
	o := demo.Defaults()
	o.Groups, o.Partitions, o.Bad, o.Scorers = 2, 2, 1, 1
	o.Brokers = b.Addrs()
	o.Timeout = 2 * time.Minute
	if _, err := demo.Run(context.Background(), o); err != nil {
		t.Fatalf("live pipeline: %v", err)
	}
	return b.Addrs()
}

// topicEnds maps every live topic to its end offsets (nil: no such topic).
func topicEnds(t *testing.T, brokers []string, topics ...string) map[string]map[int]int64 {
	t.Helper()
	out := map[string]map[int]int64{}
	for _, tp := range topics {
		e, err := consumers.TopicEnds(context.Background(), brokers, kafkasec.Config{}, tp)
		if err != nil {
			t.Fatal(err)
		}
		out[tp] = e
	}
	return out
}

func equalEnds(a, b map[string]map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for tp, ea := range a {
		eb := b[tp]
		if len(ea) != len(eb) || (ea == nil) != (eb == nil) {
			return false
		}
		for p, o := range ea {
			if eb[p] != o {
				return false
			}
		}
	}
	return true
}

// TestReplayNeverTouchesLiveTopics: a replay into a live topic, or into a
// non-empty topic without --append, fails with a message naming the topic
// and changes no topic; a good replay writes its state and dead letters to
// its own topics and leaves the live ones as they were.
func TestReplayNeverTouchesLiveTopics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline on an embedded broker")
	}
	brokers := livePipeline(t)
	live := stage.DefaultTopics()
	liveTopics := []string{live.Trajectories, live.Scored, live.Samples, live.DeadLetters, live.State}
	before := topicEnds(t, brokers, liveTopics...)
	if before[live.State] == nil || before[live.DeadLetters][0] == 0 {
		t.Fatalf("the live pipeline left no state or dead letters: %v", before)
	}
	bk := strings.Join(brokers, ",")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic-samples", live.Samples}, "creditflow.samples is the live samples topic"},
		{[]string{"--topic-samples", "x", "--topic-state", live.State, "--append"}, "is the live state topic"},
		{[]string{"--topic-samples", "x", "--topic-dead-letters", live.DeadLetters}, "is the live dead-letter topic"},
		{[]string{"--topic-samples", live.Scored, "--append"}, "is the scored topic this replay reads"},
		{[]string{"--topic-samples", live.Trajectories}, "live trajectories topic"},
	} {
		args := append([]string{"--brokers", bk, "--log-level", "error"}, c.args...)
		out, err := captureStdout(t, func() error { return runReplay(args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("replay %v: err %v, want it to say %q\n%s", c.args, err, c.want, out)
		}
	}
	if after := topicEnds(t, brokers, liveTopics...); !equalEnds(before, after) {
		t.Fatalf("a refused replay changed the live topics: before %v after %v", before, after)
	}
	// The x topics of the refused replays must not have been created either.
	if e := topicEnds(t, brokers, "x", "x.state", "x.dead-letters"); e["x"] != nil || e["x.state"] != nil || e["x.dead-letters"] != nil {
		t.Fatalf("a refused replay created topics: %v", e)
	}

	// A good replay: own state and dead-letter topics, live topics unchanged.
	args := []string{"--brokers", bk, "--log-level", "error", "--topic-samples", "creditflow.samples.lambda-1", "--lambda", "1"}
	out, err := captureStdout(t, func() error { return runReplay(args) })
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	if !strings.Contains(out, "creditflow.samples.lambda-1.state") {
		t.Fatalf("the replay does not say where its state went:\n%s", out)
	}
	if after := topicEnds(t, brokers, liveTopics...); !equalEnds(before, after) {
		t.Fatalf("a replay changed the live topics: before %v after %v", before, after)
	}
	own := topicEnds(t, brokers, "creditflow.samples.lambda-1", "creditflow.samples.lambda-1.state")
	var samples, snaps int64
	for _, e := range own["creditflow.samples.lambda-1"] {
		samples += e
	}
	for _, e := range own["creditflow.samples.lambda-1.state"] {
		snaps += e
	}
	if samples != 10 || snaps == 0 {
		t.Fatalf("replay wrote %d samples (want 10) and %d snapshots (want > 0)", samples, snaps)
	}

	// The same output again: refused (it holds records), allowed with --append.
	if _, err := captureStdout(t, func() error { return runReplay(args) }); err == nil || !strings.Contains(err.Error(), "already holds records") {
		t.Fatalf("second replay into the same topic: %v", err)
	}
	if out, err := captureStdout(t, func() error { return runReplay(append(args, "--append")) }); err != nil {
		t.Fatalf("replay --append: %v\n%s", err, out)
	}
}

// TestReplayWithoutCreatePermission: on a cluster that refuses CreateTopics
// (a service account without the CREATE permission), a replay into output
// topics that operators created runs, and creates nothing.
func TestReplayWithoutCreatePermission(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline on an embedded broker")
	}
	b := brokertest.Start(t, broker.WithDefaultPartitions(2))
	o := demo.Defaults()
	o.Groups, o.Partitions, o.Bad, o.Scorers, o.Brokers, o.Timeout = 2, 2, 0, 1, b.Addrs(), 2*time.Minute
	if _, err := demo.Run(context.Background(), o); err != nil {
		t.Fatalf("live pipeline: %v", err)
	}
	const out = "ops.samples.replay"
	if err := producers.EnsureTopics(context.Background(), b.Addrs(), kafkasec.Config{},
		producers.TopicSpec{Name: out, Partitions: 2}, producers.TopicSpec{Name: out + ".state", Partitions: 1, Compact: true},
		producers.TopicSpec{Name: out + ".dead-letters", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	creates := 0
	b.Cluster().ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		creates++
		r := req.(*kmsg.CreateTopicsRequest)
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, tp := range r.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic, rt.ErrorCode = tp.Topic, kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	args := []string{"--brokers", strings.Join(b.Addrs(), ","), "--log-level", "error", "--topic-samples", out, "--lambda", "1"}
	if stdout, err := captureStdout(t, func() error { return runReplay(args) }); err != nil {
		t.Fatalf("replay into existing topics without CREATE permission: %v\n%s", err, stdout)
	}
	var samples int64
	for _, e := range topicEnds(t, b.Addrs(), out)[out] {
		samples += e
	}
	if samples != 10 || creates != 0 {
		t.Fatalf("replay wrote %d samples (want 10) after %d CreateTopics requests (want 0)", samples, creates)
	}
}
