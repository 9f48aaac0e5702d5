package stage

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/producers"
)

// The topics `creditflow run --create-topics N` makes are the ones the
// Helm chart declares as Strimzi KafkaTopics (helm/creditflow/templates/
// strimzi.yaml), for clusters without Strimzi:
//
//   - trajectories, scored, samples and stale samples: N partitions,
//     cleanup.policy=delete with retention.ms Retention (7 days);
//   - dead letters: one partition, retention.ms DeadLetterRetention (30 days);
//   - state: compacted, with as many partitions as the scored topic (N, or
//     the scored topic's count when it exists already): each input
//     partition's snapshots sit in the state partition their key hashes to,
//     so more state partitions spread the snapshots of more input
//     partitions, and any count works (docs/stream.md);
//   - policy: compacted, one partition (policy.TopicSpec);
//   - every topic: max.message.bytes MaxMessageBytes, the replication
//     factor ReplicationFactor and, above 1, min.insync.replicas
//     min(2, ReplicationFactor), so that an acknowledged write survives the
//     loss of one broker.
//
// Topics that exist are left as they are.
const (
	DefaultRetention           = 7 * 24 * time.Hour
	DefaultDeadLetterRetention = 30 * 24 * time.Hour
)

// TopicSpecs are the topics the pipeline needs, for producers.EnsureTopics,
// the trajectories, scored, samples, stale samples and state topics with
// partitions partitions.
func (c *Config) TopicSpecs(partitions int) []producers.TopicSpec {
	specs := []producers.TopicSpec{
		c.DataTopicSpec(c.Topics.Trajectories, partitions),
		c.DataTopicSpec(c.Topics.Scored, partitions),
		c.DataTopicSpec(c.Topics.Samples, partitions),
		c.DeadLetterTopicSpec(c.Topics.DeadLetters),
		c.StateTopicSpec(c.Topics.State, partitions),
		c.DataTopicSpec(c.Topics.SamplesStale, partitions),
	}
	if c.Topics.Policy != "" {
		ps := policy.TopicSpec(c.Topics.Policy)
		ps.ReplicationFactor = c.ReplicationFactor
		ps.Configs = c.topicConfigs()
		specs = append(specs, ps)
	}
	return specs
}

// DataTopicSpec is a topic of records (trajectories, scored, samples):
// deleted after Retention.
func (c *Config) DataTopicSpec(name string, partitions int) producers.TopicSpec {
	return c.retainedTopic(name, partitions, c.Retention)
}

// DeadLetterTopicSpec is the dead-letter topic: one partition, deleted
// after DeadLetterRetention.
func (c *Config) DeadLetterTopicSpec(name string) producers.TopicSpec {
	return c.retainedTopic(name, 1, c.DeadLetterRetention)
}

// StateTopicSpec is the advantage stage's changelog: compacted, with the
// partitions of the scored topic it keeps state for.
func (c *Config) StateTopicSpec(name string, partitions int) producers.TopicSpec {
	return producers.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: c.ReplicationFactor, Compact: true, Configs: c.topicConfigs()}
}

func (c *Config) retainedTopic(name string, partitions int, retention time.Duration) producers.TopicSpec {
	cfg := c.topicConfigs()
	cfg["cleanup.policy"] = "delete"
	if ms := retentionMs(retention); ms != "" {
		cfg["retention.ms"] = ms
	}
	return producers.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: c.ReplicationFactor, Configs: cfg}
}

// topicConfigs are the configs every topic gets: max.message.bytes, and
// min.insync.replicas with a replication factor above 1.
func (c *Config) topicConfigs() map[string]string {
	m := c.MaxMessageBytes
	if m <= 0 {
		m = DefaultMaxMessageBytes
	}
	cfg := map[string]string{"max.message.bytes": strconv.Itoa(m)}
	if c.ReplicationFactor > 1 {
		cfg["min.insync.replicas"] = strconv.Itoa(min(2, c.ReplicationFactor))
	}
	return cfg
}

// retentionMs is retention.ms for d: "" (not set: the brokers' default)
// for 0, -1 (for ever) for a negative d.
func retentionMs(d time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d < 0:
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// checkRetention refuses a retention Kafka cannot express (under a
// millisecond).
func (c *Config) checkRetention() error {
	for _, r := range []struct {
		flag string
		d    time.Duration
	}{{"--retention", c.Retention}, {"--dead-letter-retention", c.DeadLetterRetention}} {
		if r.d > 0 && r.d < time.Millisecond {
			return fmt.Errorf("%s %v: Kafka keeps records for whole milliseconds; use at least 1ms, 0 for the brokers' default or -1ms to keep them for ever", r.flag, r.d)
		}
	}
	return nil
}

// CreateTopics creates the pipeline's missing topics (TopicSpecs with
// partitions partitions) and leaves the others as they are. A state topic
// it creates gets the scored topic's partition count when that topic
// exists already. Creating a topic needs the CREATE permission; on a
// cluster where every topic exists it needs none.
func (c *Config) CreateTopics(ctx context.Context, partitions int) error {
	specs := c.TopicSpecs(partitions)
	if counts, err := producers.PartitionCounts(ctx, c.Brokers, c.Security, c.Topics.Scored); err == nil && counts[c.Topics.Scored] > 0 {
		for i := range specs {
			if specs[i].Name == c.Topics.State {
				specs[i].Partitions = counts[c.Topics.Scored]
			}
		}
	} // else: EnsureTopics reports what is wrong with the brokers
	return producers.EnsureTopics(ctx, c.Brokers, c.Security, specs...)
}

// CheckStatePartitions logs, at start-up of the advantage stage, a state
// topic with fewer partitions than the scored topic (one made by an older
// --create-topics, say). It works as it is — a snapshot sits in the state
// partition its key hashes to, whatever the count — but the snapshots of
// several input partitions then share a state partition; partitions can be
// added to it at any time, the stage finds snapshots written before
// (docs/stream.md). It returns the two counts.
func (c *Config) CheckStatePartitions(ctx context.Context) (state, scored int, err error) {
	counts, err := producers.PartitionCounts(ctx, c.Brokers, c.Security, c.Topics.State, c.Topics.Scored)
	if err != nil {
		return 0, 0, err
	}
	state, scored = counts[c.Topics.State], counts[c.Topics.Scored]
	if state > 0 && state < scored {
		c.Logger.Info().Str("topic", c.Topics.State).Int("state_partitions", state).Int("scored_partitions", scored).
			Msg(fmt.Sprintf("the state topic has fewer partitions than %s; this works, snapshots of several input partitions share a state partition. "+
				"To spread them, add partitions (kafka-topics.sh --alter --topic %s --partitions %d); snapshots written before are still found",
				c.Topics.Scored, c.Topics.State, scored))
	}
	return state, scored, nil
}
