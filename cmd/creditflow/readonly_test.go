package main

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
)

// listTopics returns the names of every topic on the brokers, sorted.
func listTopics(t *testing.T, brokers []string) []string {
	t.Helper()
	tr := &kafka.Transport{} // its own: the default transport answers from a metadata cache
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tp := range md.Topics {
		out = append(out, tp.Name)
	}
	sort.Strings(out)
	return out
}

// TestReadOnlyToolsCreateNoTopic: inspect, monitor and replay (which
// reads the scored topic before it writes anything) on a cluster that
// creates topics on demand (as the embedded broker does) leave its topics
// as they were: a missing samples topic is an error naming it, a missing
// optional topic (scored, dead letters, policy) is left out.
func TestReadOnlyToolsCreateNoTopic(t *testing.T) {
	b := brokertest.Start(t)
	addr := strings.Join(b.Addrs(), ",")
	samples := stage.DefaultTopics().Samples
	if err := producers.EnsureTopics(context.Background(), b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: samples, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	before := listTopics(t, b.Addrs())
	if strings.Join(before, ",") != samples {
		t.Fatalf("topics before: %v", before)
	}
	for _, c := range []struct {
		args []string
		want string // in the error; "" : no error
	}{
		{[]string{"inspect", "--topic", "no.such.topic", "--trajectory", "x"}, "topic no.such.topic does not exist"},
		{[]string{"inspect", "--topic", "no.such.topic", "--best", "3"}, "topic no.such.topic does not exist"},
		{[]string{"inspect", "--trajectory", "x", "--compare", "no.such.replay"}, "--compare topic no.such.replay does not exist"},
		{[]string{"inspect", "--trajectory", "x"}, "x"}, // the samples topic exists (empty): not found, and no scored topic made
		{[]string{"monitor", "--once", "--topics", "no.such.topic"}, "topic no.such.topic does not exist"},
		{[]string{"monitor", "--once", "--json"}, ""}, // dead letters, scored and policy topics missing: left out
		{[]string{"replay", "--jsonl"}, "scored topic creditflow.scored does not exist"},
		{[]string{"replay", "--topic-samples", "creditflow.samples.replay-1"}, "scored topic creditflow.scored does not exist"},
	} {
		args := append(c.args, "--brokers", addr)
		var err error
		stderr, _ := captureStderr(t, func() error {
			_, err = captureStdout(t, func() error { return commands[args[0]].run(args[1:]) })
			return nil
		})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want one with %q", c.args, err, c.want)
		}
		var ue usageError
		if errors.As(err, &ue) {
			t.Errorf("%v: a usage error (exit status 2) for a topic the cluster lacks: %v", c.args, err)
		}
		if after := listTopics(t, b.Addrs()); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Fatalf("%v changed the topics: %v, before %v (stderr %q)", c.args, after, before, stderr)
		}
	}
}
