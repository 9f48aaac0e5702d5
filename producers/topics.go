package producers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/kafkasec"
)

// TopicSpec describes a topic for EnsureTopics.
type TopicSpec struct {
	Name string
	// Partitions <= 0 uses the broker's default.
	Partitions int
	// ReplicationFactor <= 0 uses the broker's default.
	ReplicationFactor int
	// Compact sets cleanup.policy=compact (changelog topics).
	Compact bool
	// Configs are further topic configs (retention.ms, …).
	Configs map[string]string
}

// EnsureTopics creates the topics that do not exist yet. It is idempotent:
// existing topics are left as they are (their partition count is not
// changed). It asks first which topics exist and sends CreateTopics only
// for the missing ones, so on a cluster where every topic exists it needs
// no permission to create topics. Transient failures are retried until ctx
// ends.
func EnsureTopics(ctx context.Context, brokers []string, sec kafkasec.Config, specs ...TopicSpec) error {
	if len(brokers) == 0 {
		return errors.New("producers: EnsureTopics: no brokers configured")
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	if missing, err := MissingTopics(ctx, brokers, sec, names...); err == nil {
		want := map[string]bool{}
		for _, m := range missing {
			want[m] = true
		}
		var left []TopicSpec
		for _, s := range specs {
			if want[s.Name] {
				left = append(left, s)
			}
		}
		specs = left
	} // else: ask to create them all; CreateTopics says which exist
	if len(specs) == 0 {
		return nil
	}
	tr, err := sec.Transport()
	if err != nil {
		return fmt.Errorf("producers: EnsureTopics: %w", err)
	}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	req := &kafka.CreateTopicsRequest{}
	for _, s := range specs {
		if s.Name == "" {
			return errors.New("producers: EnsureTopics: topic spec without a name")
		}
		tc := kafka.TopicConfig{Topic: s.Name, NumPartitions: -1, ReplicationFactor: -1}
		if s.Partitions > 0 {
			tc.NumPartitions = s.Partitions
		}
		if s.ReplicationFactor > 0 {
			tc.ReplicationFactor = s.ReplicationFactor
		}
		if s.Compact {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: "cleanup.policy", ConfigValue: "compact"})
		}
		for k, v := range s.Configs {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
		}
		req.Topics = append(req.Topics, tc)
	}
	backoff := 100 * time.Millisecond
	for {
		resp, err := client.CreateTopics(ctx, req)
		if err == nil {
			var errs []error
			for t, e := range resp.Errors {
				if e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
					errs = append(errs, fmt.Errorf("topic %s: %w%s", t, e, createHint(e)))
				}
			}
			if len(errs) == 0 {
				return nil
			}
			err = errors.Join(errs...)
		}
		if !Retriable(err) || ctx.Err() != nil {
			return fmt.Errorf("producers: creating topics: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("producers: creating topics: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// createHint says what to do about a topic CreateTopics refused.
func createHint(err error) string {
	switch {
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.ClusterAuthorizationFailed):
		return " (this user may not create topics: grant it CREATE, or have an administrator create the topics with the settings docs/kafka.md lists)"
	case errors.Is(err, kafka.InvalidReplicationFactor):
		return " (the replication factor asked for exceeds the brokers available: lower --replication-factor, or 0 for the brokers' default)"
	}
	return ""
}

// PartitionFor returns the partition a keyed message lands in when the
// topic has n partitions: murmur2(key) & 0x7fffffff mod n, like the Java
// client's default partitioner.
func PartitionFor(key []byte, n int) int {
	if n <= 0 {
		return 0
	}
	return int((murmur2(key) & 0x7fffffff) % uint32(n))
}

// murmur2 is the Java client's Utils.murmur2 (seed 0x9747b28c).
func murmur2(data []byte) uint32 {
	length := len(data)
	const (
		seed uint32 = 0x9747b28c
		m           = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(length)
	length4 := length / 4
	for i := 0; i < length4; i++ {
		i4 := i * 4
		k := uint32(data[i4+0]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= uint32(data[(length&^3)+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[(length&^3)+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[length&^3])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// MissingTopics returns the names among topics that do not exist on the
// cluster (in the order given). It asks for metadata without allowing the
// brokers to create topics automatically, so a check never creates one.
func MissingTopics(ctx context.Context, brokers []string, sec kafkasec.Config, topics ...string) ([]string, error) {
	found, err := PartitionCounts(ctx, brokers, sec, topics...)
	if err != nil {
		return nil, err
	}
	var missing []string
	seen := map[string]bool{}
	for _, t := range topics {
		if found[t] == 0 && !seen[t] {
			missing = append(missing, t)
		}
		seen[t] = true
	}
	return missing, nil
}

// PartitionCounts returns the partition count of each of topics that
// exists; a missing topic has no entry. Like MissingTopics it never
// creates a topic.
func PartitionCounts(ctx context.Context, brokers []string, sec kafkasec.Config, topics ...string) (map[string]int, error) {
	if len(topics) == 0 {
		return map[string]int{}, nil
	}
	tr, err := sec.Transport()
	if err != nil {
		return nil, fmt.Errorf("producers: topic metadata: %w", err)
	}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("producers: topic metadata: %w", err)
	}
	found := map[string]int{}
	for _, t := range resp.Topics {
		if t.Error == nil && len(t.Partitions) > 0 {
			found[t.Name] = len(t.Partitions)
		}
	}
	return found, nil
}
