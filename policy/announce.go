package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// Announce writes an announcement of version (with the checkpoint location,
// "" when the weights are not published) to topic (DefaultTopic when
// empty), keyed by schemas.PolicyKey so compaction keeps the newest, and
// waits for the broker's acknowledgement. AnnouncedAtMs is set to the wall
// clock when a.AnnouncedAtMs is 0.
//
// Announce at most one version per weight update, in increasing order;
// readers take the maximum, so a repeated or late announcement is harmless.
func Announce(ctx context.Context, prod *producers.Producer, topic string, a schemas.PolicyAnnouncement) error {
	if topic == "" {
		topic = DefaultTopic
	}
	if a.Version < 0 {
		return fmt.Errorf("policy: announce version %d: versions are >= 0", a.Version)
	}
	if a.AnnouncedAtMs == 0 {
		a.AnnouncedAtMs = time.Now().UnixMilli()
	}
	b, err := schemas.Policies().Encode(&a)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	err = prod.Produce(ctx, producers.Message{
		Topic: topic, Key: []byte(schemas.PolicyKey), Value: b,
		Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.NamePolicy)}},
	})
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		return fmt.Errorf("policy: announce version %d on %s: %w (create the topic: `creditflow announce --create-topic`, or `creditflow run --create-topics N`)", a.Version, topic, err)
	}
	if err != nil {
		return fmt.Errorf("policy: announce version %d on %s: %w", a.Version, topic, err)
	}
	return nil
}

// TopicSpec is the control topic for producers.EnsureTopics: one
// partition, compacted.
func TopicSpec(topic string) producers.TopicSpec {
	if topic == "" {
		topic = DefaultTopic
	}
	return producers.TopicSpec{Name: topic, Partitions: 1, Compact: true} // replication: the brokers' default
}
