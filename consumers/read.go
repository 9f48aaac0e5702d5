package consumers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/kafkasec"
)

// partitionBounds returns the first offset and the end offset (next offset
// to be written) of a partition, asking its leader.
func partitionBounds(ctx context.Context, d *kafka.Dialer, brokers []string, topic string, partition int) (first, end int64, err error) {
	var errs []error
	for _, b := range brokers {
		conn, err := d.DialLeader(ctx, "tcp", b, topic, partition)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		first, end, err = conn.ReadOffsets()
		_ = conn.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		return first, end, nil
	}
	return 0, 0, fmt.Errorf("consumers: offsets of %s/%d: %w", topic, partition, errors.Join(errs...))
}

// EndOffsets returns, for each partition of topic, the offset the next
// record will get (the high watermark).
func EndOffsets(ctx context.Context, brokers []string, sec kafkasec.Config, topic string) (map[int]int64, error) {
	d, err := sec.Dialer()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	parts, err := partitions(ctx, d, brokers, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(parts))
	for _, p := range parts {
		_, end, err := partitionBounds(ctx, d, brokers, topic, p)
		if err != nil {
			return nil, err
		}
		out[p] = end
	}
	return out, nil
}

// Partitions returns the partition ids of topic.
func Partitions(ctx context.Context, brokers []string, sec kafkasec.Config, topic string) ([]int, error) {
	d, err := sec.Dialer()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	return partitions(ctx, d, brokers, topic)
}

func partitions(ctx context.Context, d *kafka.Dialer, brokers []string, topic string) ([]int, error) {
	var errs []error
	for _, b := range brokers {
		conn, err := d.DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		ps, err := conn.ReadPartitions(topic)
		_ = conn.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		out := make([]int, 0, len(ps))
		for _, p := range ps {
			if p.Topic == topic {
				out = append(out, p.ID)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("consumers: partitions of %s: %w", topic, errors.Join(errs...))
}

// ReadPartitionRange reads topic/partition from offset from (use
// kafka.FirstOffset, -2, for the beginning) up to the partition's end offset
// at the time of the call, calling fn for each record in offset order. It
// returns the end offset it read up to (the next offset to read). Use it to
// reload state from a compacted changelog topic when a partition is
// assigned. An error from fn stops the read and is returned.
func ReadPartitionRange(ctx context.Context, brokers []string, sec kafkasec.Config, topic string, partition int, from int64, fn func(Record) error) (int64, error) {
	d, err := sec.Dialer()
	if err != nil {
		return 0, fmt.Errorf("consumers: %w", err)
	}
	first, end, err := partitionBounds(ctx, d, brokers, topic, partition)
	if err != nil {
		return 0, err
	}
	if from < first {
		from = first
	}
	return readRange(ctx, d, brokers, topic, partition, from, end, fn)
}

// LastMatch finds the newest record of topic/partition for which match is
// true, reading backwards from the partition's end offset in windows of
// window records that double each time one holds no match (records within
// a window are read forward). It returns the record, whether one matched,
// and how many records it read. A key's newest record in a changelog topic
// is therefore found at the cost of the records written after it, not of
// the whole partition.
func LastMatch(ctx context.Context, brokers []string, sec kafkasec.Config, topic string, partition int, window int64, match func(Record) bool) (Record, bool, int64, error) {
	d, err := sec.Dialer()
	if err != nil {
		return Record{}, false, 0, fmt.Errorf("consumers: %w", err)
	}
	first, end, err := partitionBounds(ctx, d, brokers, topic, partition)
	if err != nil {
		return Record{}, false, 0, err
	}
	if window < 1 {
		window = 1
	}
	var (
		last  Record
		found bool
		read  int64
	)
	for hi := end; hi > first && !found; window *= 2 {
		lo := max(hi-window, first)
		if _, err := readRange(ctx, d, brokers, topic, partition, lo, hi, func(r Record) error {
			read++
			if match(r) {
				last, found = r, true
			}
			return nil
		}); err != nil {
			return Record{}, false, read, err
		}
		hi = lo
	}
	return last, found, read, nil
}

// readRange calls fn for each record of topic/partition in [from, end), in
// offset order, and returns end.
func readRange(ctx context.Context, d *kafka.Dialer, brokers []string, topic string, partition int, from, end int64, fn func(Record) error) (int64, error) {
	if from >= end {
		return end, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: topic, Partition: partition, Dialer: d,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return 0, fmt.Errorf("consumers: seek %s/%d to %d: %w", topic, partition, from, err)
	}
	for {
		// Records can be missing at the end (transaction markers); the
		// reader's position then still reaches end.
		if r.Offset() >= end {
			return end, nil
		}
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return 0, fmt.Errorf("consumers: reading %s/%d: %w", topic, partition, err)
		}
		if m.Offset >= end {
			return end, nil
		}
		rec := Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, Header{Key: h.Key, Value: h.Value})
		}
		if err := fn(rec); err != nil {
			return 0, err
		}
		if m.Offset+1 >= end {
			return end, nil
		}
	}
}

// CommittedOffsets returns the offsets committed by groupID for the given
// partitions of topic; a partition without a commit maps to -1.
func CommittedOffsets(ctx context.Context, brokers []string, sec kafkasec.Config, groupID, topic string, parts []int) (map[int]int64, error) {
	tr, err := sec.Transport()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: groupID, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("consumers: committed offsets of group %s: %w", groupID, err)
	}
	out := make(map[int]int64, len(parts))
	if errors.Is(resp.Error, kafka.GroupIdNotFound) {
		// A group that never committed (some brokers say so explicitly).
		for _, p := range parts {
			out[p] = -1
		}
		return out, nil
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("consumers: committed offsets of group %s: %w", groupID, resp.Error)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("consumers: committed offset of %s/%d: %w", topic, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// TopicEnds returns the end offset of every partition of topic, or nil
// when the topic does not exist. Unlike EndOffsets it asks without letting
// the broker auto-create the topic, so it is safe for checks before
// writing ("is this output topic new or empty?").
func TopicEnds(ctx context.Context, brokers []string, sec kafkasec.Config, topic string) (map[int]int64, error) {
	tr, err := sec.Transport()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("consumers: metadata of %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				return nil, nil
			}
			return nil, fmt.Errorf("consumers: metadata of %s: %w", topic, t.Error)
		}
		return EndOffsets(ctx, brokers, sec, topic)
	}
	return nil, nil
}
