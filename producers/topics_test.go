package producers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// denyCreateTopics makes the broker refuse every CreateTopics request as a
// cluster without the CREATE permission does, and counts the requests.
func denyCreateTopics(b *broker.Broker, count *int) {
	b.Cluster().ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		*count++
		r := req.(*kmsg.CreateTopicsRequest)
		resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewCreateTopicsResponseTopic()
			rt.Topic = t.Topic
			rt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// TestEnsureTopicsWithoutCreatePermission: on a cluster that refuses
// CreateTopics, EnsureTopics of topics that all exist succeeds without
// asking to create anything; a missing topic fails with the refusal.
func TestEnsureTopicsWithoutCreatePermission(t *testing.T) {
	b, err := broker.Start(broker.WithTopics(2, "have.a", "have.b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	creates := 0
	denyCreateTopics(b, &creates)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	specs := []producers.TopicSpec{{Name: "have.a", Partitions: 2}, {Name: "have.b", Partitions: 2, Compact: true}}
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, specs...); err != nil {
		t.Fatalf("existing topics on a cluster without CREATE permission: %v", err)
	}
	if creates != 0 {
		t.Fatalf("%d CreateTopics requests for topics that exist", creates)
	}
	err = producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, append(specs, producers.TopicSpec{Name: "new.c"})...)
	if err == nil || creates != 1 {
		t.Fatalf("a missing topic without CREATE permission: err %v after %d requests, want the refusal after 1", err, creates)
	}
	if !strings.Contains(err.Error(), "new.c") || !strings.Contains(err.Error(), "grant it CREATE") {
		t.Fatalf("refusal %q does not name the topic and say what to do", err)
	}
	missing, err := producers.MissingTopics(ctx, b.Addrs(), kafkasec.Config{}, "have.a", "new.c", "have.b", "new.c")
	if err != nil || !slices.Equal(missing, []string{"new.c"}) {
		t.Fatalf("MissingTopics: %v (%v), want [new.c]", missing, err)
	}
}

// TestEnsureTopicsReplicationFactor: 0 takes the brokers' default (3 on a
// 3-broker cluster), a positive factor is used as given, and one above the
// brokers' count is refused saying what to change.
func TestEnsureTopicsReplicationFactor(t *testing.T) {
	b, err := broker.Start(broker.WithBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{},
		producers.TopicSpec{Name: "rf.default", Partitions: 2}, producers.TopicSpec{Name: "rf.two", Partitions: 2, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Timeout: 10 * time.Second}
	resp, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{"rf.default", "rf.two"}})
	if err != nil {
		t.Fatal(err)
	}
	err = producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: "rf.four", ReplicationFactor: 4})
	if err == nil || !strings.Contains(err.Error(), "lower --replication-factor") {
		t.Fatalf("4 replicas on 3 brokers: %v, want a refusal that says to lower --replication-factor", err)
	}
	want := map[string]int{"rf.default": 3, "rf.two": 2}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if len(p.Replicas) != want[tp.Name] {
				t.Fatalf("%s/%d has %d replicas, want %d", tp.Name, p.ID, len(p.Replicas), want[tp.Name])
			}
		}
	}
}
