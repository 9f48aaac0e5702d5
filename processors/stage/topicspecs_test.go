package stage_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
)

// topicInfo is a topic as the brokers describe it: partitions, replicas
// per partition, and its configs with whether each was set on the topic.
type topicInfo struct {
	partitions, replicas int
	configs              map[string]string
	set                  map[string]bool // DYNAMIC_TOPIC_CONFIG: set on the topic, not a default
}

// describeTopics reads topics back from the brokers: Metadata for the
// partitions and replicas, DescribeConfigs for the configs.
func describeTopics(t *testing.T, ctx context.Context, brokers []string, topics ...string) map[string]topicInfo {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]topicInfo{}
	for _, tp := range md.Topics {
		if tp.Error != nil {
			t.Fatalf("topic %s: %v", tp.Name, tp.Error)
		}
		out[tp.Name] = topicInfo{partitions: len(tp.Partitions), replicas: len(tp.Partitions[0].Replicas), configs: map[string]string{}, set: map[string]bool{}}
	}
	req := &kafka.DescribeConfigsRequest{}
	for _, n := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: n})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			t.Fatalf("describe configs of %s: %v", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			out[r.ResourceName].configs[e.ConfigName] = e.ConfigValue
			out[r.ResourceName].set[e.ConfigName] = e.ConfigSource == 1
		}
	}
	return out
}

// TestCreateTopicsAsChart: `run --create-topics 4 --replication-factor 3`
// on a 3-broker cluster makes the topics the chart's KafkaTopics declare —
// read back from the brokers: the state topic with the scored topic's 4
// partitions and compacted, like the policy topic; the others deleted after
// 7 days (dead letters 30); min.insync.replicas 2 and 3 replicas everywhere.
func TestCreateTopicsAsChart(t *testing.T) {
	b, err := broker.Start(broker.WithBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := stage.DefaultConfig()
	cfg.Brokers, cfg.ReplicationFactor = b.Addrs(), 3
	if err := cfg.CreateTopics(ctx, 4); err != nil {
		t.Fatal(err)
	}
	tp := cfg.Topics
	got := describeTopics(t, ctx, b.Addrs(), tp.Trajectories, tp.Scored, tp.Samples, tp.SamplesStale, tp.DeadLetters, tp.State, tp.Policy)
	week, month := "604800000", "2592000000"
	for _, w := range []struct {
		name       string
		partitions int
		cleanup    string
		retention  string // "": not set on the topic
	}{
		{tp.Trajectories, 4, "delete", week},
		{tp.Scored, 4, "delete", week},
		{tp.Samples, 4, "delete", week},
		{tp.SamplesStale, 4, "delete", week},
		{tp.DeadLetters, 1, "delete", month},
		{tp.State, 4, "compact", ""},
		{tp.Policy, 1, "compact", ""},
	} {
		g := got[w.name]
		if g.partitions != w.partitions || g.replicas != 3 {
			t.Errorf("%s: %d partitions of %d replicas, want %d of 3", w.name, g.partitions, g.replicas, w.partitions)
		}
		want := map[string]string{"cleanup.policy": w.cleanup, "min.insync.replicas": "2", "max.message.bytes": "1048588"}
		if w.retention != "" {
			want["retention.ms"] = w.retention
		} else if g.set["retention.ms"] {
			t.Errorf("%s: retention.ms %s set on a compacted topic", w.name, g.configs["retention.ms"])
		}
		for k, v := range want {
			if g.configs[k] != v || !g.set[k] {
				t.Errorf("%s: %s = %q (set on the topic: %v), want %q", w.name, k, g.configs[k], g.set[k], v)
			}
		}
	}
}

// TestCreateTopicsSingleReplica: with one replica (--replication-factor 1,
// or 0: the brokers' default, one on the embedded single broker)
// min.insync.replicas is left to the brokers — 2 would refuse every write —
// and retention follows --retention; 0 leaves it to the brokers too.
func TestCreateTopicsSingleReplica(t *testing.T) {
	for _, rf := range []int{0, 1} {
		b, err := broker.Start()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg := stage.DefaultConfig()
		cfg.Brokers, cfg.ReplicationFactor, cfg.Retention, cfg.DeadLetterRetention = b.Addrs(), rf, 36*time.Hour, 0
		if err := cfg.CreateTopics(ctx, 2); err != nil {
			t.Fatal(err)
		}
		got := describeTopics(t, ctx, b.Addrs(), cfg.Topics.Scored, cfg.Topics.DeadLetters, cfg.Topics.State)
		for n, g := range got {
			if g.replicas != 1 || g.set["min.insync.replicas"] {
				t.Errorf("--replication-factor %d: %s: %d replicas, min.insync.replicas %s (set on the topic: %v); want 1 replica and the brokers' default",
					rf, n, g.replicas, g.configs["min.insync.replicas"], g.set["min.insync.replicas"])
			}
		}
		if g := got[cfg.Topics.Scored]; g.configs["retention.ms"] != "129600000" || !g.set["retention.ms"] {
			t.Errorf("scored topic: retention.ms %q, want 129600000 (36h)", g.configs["retention.ms"])
		}
		if g := got[cfg.Topics.DeadLetters]; g.set["retention.ms"] {
			t.Errorf("dead letters with retention 0: retention.ms %q set, want the brokers' default", g.configs["retention.ms"])
		}
		if g := got[cfg.Topics.State]; g.partitions != 2 {
			t.Errorf("state topic: %d partitions, want the scored topic's 2", g.partitions)
		}
	}
}

// TestCreateTopicsLeavesExisting: topics that exist keep their partitions
// and configs; a missing state topic gets the existing scored topic's
// partition count (6), not --create-topics' (2); and a state topic with
// fewer partitions than the scored topic is reported at start-up.
func TestCreateTopicsLeavesExisting(t *testing.T) {
	b, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs bytes.Buffer
	cfg := stage.DefaultConfig()
	cfg.Brokers, cfg.Logger = b.Addrs(), zerolog.New(&logs)
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{},
		producers.TopicSpec{Name: cfg.Topics.Scored, Partitions: 6, Configs: map[string]string{"retention.ms": "1000"}},
		producers.TopicSpec{Name: cfg.Topics.Samples, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.CreateTopics(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got := describeTopics(t, ctx, b.Addrs(), cfg.Topics.Scored, cfg.Topics.Samples, cfg.Topics.State, cfg.Topics.Trajectories)
	if g := got[cfg.Topics.Scored]; g.partitions != 6 || g.configs["retention.ms"] != "1000" {
		t.Errorf("existing scored topic changed: %d partitions, retention.ms %s", g.partitions, g.configs["retention.ms"])
	}
	if g := got[cfg.Topics.Samples]; g.partitions != 3 || g.set["cleanup.policy"] || g.set["retention.ms"] {
		t.Errorf("existing samples topic changed: %d partitions, configs %v", g.partitions, g.configs)
	}
	if g := got[cfg.Topics.State]; g.partitions != 6 {
		t.Errorf("state topic: %d partitions, want the existing scored topic's 6", g.partitions)
	}
	if g := got[cfg.Topics.Trajectories]; g.partitions != 2 {
		t.Errorf("trajectories: %d partitions, want 2", g.partitions)
	}
	if st, sc, err := cfg.CheckStatePartitions(ctx); err != nil || st != 6 || sc != 6 || logs.Len() != 0 {
		t.Fatalf("state 6 of scored 6: %d, %d, %v, logged %q", st, sc, err, logs.String())
	}

	// A state topic from an older --create-topics: one partition.
	cfg.Topics.State = "old.state"
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: cfg.Topics.State, Partitions: 1, Compact: true}); err != nil {
		t.Fatal(err)
	}
	st, sc, err := cfg.CheckStatePartitions(ctx)
	if err != nil || st != 1 || sc != 6 {
		t.Fatalf("state 1 of scored 6: %d, %d, %v", st, sc, err)
	}
	if l := logs.String(); !strings.Contains(l, "old.state") || !strings.Contains(l, "--partitions 6") {
		t.Fatalf("a state topic with fewer partitions than the scored topic: logged %q, want the topic and how to add partitions", l)
	}
}

// TestCheckRetention: a retention Kafka cannot express is refused, naming
// the flag.
func TestCheckRetention(t *testing.T) {
	cfg := stage.DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.DeadLetterRetention = 500 * time.Microsecond
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "--dead-letter-retention") {
		t.Fatalf("Check() = %v, want an error naming --dead-letter-retention", err)
	}
	cfg.DeadLetterRetention = -time.Millisecond
	if err := cfg.Check(); err != nil {
		t.Fatalf("negative retention (for ever): %v", err)
	}
	for _, s := range cfg.TopicSpecs(1) {
		if s.Name == cfg.Topics.DeadLetters && s.Configs["retention.ms"] != "-1" {
			t.Fatalf("dead letters kept for ever: configs %v, want retention.ms -1", s.Configs)
		}
	}
}
