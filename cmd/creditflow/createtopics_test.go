package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// TestRunCreateTopics: `run --create-topics 3 --replication-factor 3
// --retention 48h` on a 3-broker cluster makes the state topic with 3
// partitions like the scored topic, compacted, and every topic with 3
// replicas and min.insync.replicas 2, the scored topic with 48 hours'
// retention — read back from the brokers with DescribeConfigs.
func TestRunCreateTopics(t *testing.T) {
	b := brokertest.Start(t, broker.WithBrokers(3))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runStages(ctx, []string{"--brokers", strings.Join(b.Addrs(), ","), "--stage", "advantage", "--create-topics", "3",
			"--replication-factor", "3", "--retention", "48h", "--metrics-addr", "", "--log-level", "error"})
	}()
	const state, scored = "creditflow.advantage-state", "creditflow.scored"
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing, err := producers.MissingTopics(context.Background(), b.Addrs(), kafkasec.Config{}, state, scored, "creditflow.policy")
		if err == nil && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics missing after 20 s: %v (%v)", missing, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("run: %v", err)
	}

	client := &kafka.Client{Addr: kafka.TCP(b.Addrs()...), Timeout: 10 * time.Second}
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{state, scored}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range md.Topics {
		if len(tp.Partitions) != 3 || len(tp.Partitions[0].Replicas) != 3 {
			t.Errorf("%s: %d partitions of %d replicas, want 3 of 3", tp.Name, len(tp.Partitions), len(tp.Partitions[0].Replicas))
		}
	}
	resp, err := client.DescribeConfigs(context.Background(), &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: state}, {ResourceType: kafka.ResourceTypeTopic, ResourceName: scored}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		state:  {"cleanup.policy": "compact", "min.insync.replicas": "2"},
		scored: {"cleanup.policy": "delete", "min.insync.replicas": "2", "retention.ms": "172800000"},
	}
	for _, r := range resp.Resources {
		got := map[string]string{}
		for _, e := range r.ConfigEntries {
			got[e.ConfigName] = e.ConfigValue
		}
		for k, v := range want[r.ResourceName] {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", r.ResourceName, k, got[k], v)
			}
		}
	}
}
