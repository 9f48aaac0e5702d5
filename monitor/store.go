package monitor

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/schemas"
)

// Store reads samples back from their topics, without a consumer group
// (nothing is committed): one record by its location, one trajectory by
// its id, or every sample of a topic. It keeps nothing between calls.
type Store struct {
	Brokers  []string
	Security kafkasec.Config
}

// ErrNotFound is returned when no sample has the trajectory_id asked for.
var ErrNotFound = errors.New("monitor: no such sample")

// At reads and decodes the sample that starts at (partition, offset) of
// topic: a record, or the first chunk of a record written as chunks (read
// on until its last chunk).
func (s *Store) At(ctx context.Context, topic string, partition int, offset int64) (*schemas.Sample, consumers.Record, error) {
	var got *consumers.Record
	ch := newChunks()
	_, err := consumers.ReadPartitionRange(ctx, s.Brokers, s.Security, topic, partition, offset, func(raw consumers.Record) error {
		if raw.Offset-offset > maxChunkSpan {
			return errStop
		}
		rec, first := ch.add(raw)
		if rec == nil || first != offset {
			return nil
		}
		rec.Offset = first
		got = rec
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, consumers.Record{}, fmt.Errorf("monitor: read %s/%d at %d: %w", topic, partition, offset, err)
	}
	if got == nil {
		return nil, consumers.Record{}, fmt.Errorf("monitor: %s/%d has no record at %d any more (retention or compaction): %w", topic, partition, offset, ErrNotFound)
	}
	smp, err := schemas.Samples().Decode(got.Value)
	if err != nil {
		return nil, *got, fmt.Errorf("monitor: %s/%d at %d is not a sample: %w", topic, partition, offset, err)
	}
	return smp, *got, nil
}

// maxChunkSpan is how many offsets past a record's first chunk At reads
// for its last one (the reassembly's default bound).
const maxChunkSpan = 100_000

// Partitions returns the partition ids of topic, sorted.
func (s *Store) Partitions(ctx context.Context, topic string) ([]int, error) {
	ps, err := consumers.Partitions(ctx, s.Brokers, s.Security, topic)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("monitor: topic %s has no partitions: check its name and the brokers", topic)
	}
	sort.Ints(ps)
	return ps, nil
}

// KeyPartition is the partition the stages write key to (murmur2, as the
// Java client and librdkafka do).
func KeyPartition(key string, partitions []int) int {
	return (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, partitions...)
}

var errStop = errors.New("stop")

// Scan reads every sample of partition of topic up to its end offset as of
// the call, in offset order; fn returns false to stop. A record written as
// chunks is put back together and given the offset of its first chunk
// (where At reads it). Undecodable records are skipped.
func (s *Store) Scan(ctx context.Context, topic string, partition int, fn func(smp *schemas.Sample, rec consumers.Record) bool) error {
	ch := newChunks()
	_, err := consumers.ReadPartitionRange(ctx, s.Brokers, s.Security, topic, partition, kafka.FirstOffset, func(raw consumers.Record) error {
		rec, first := ch.add(raw)
		if rec == nil {
			return nil
		}
		rec.Offset = first
		smp, err := schemas.Samples().Decode(rec.Value)
		if err != nil {
			return nil
		}
		if !fn(smp, *rec) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// Find reads topic for the sample trajectoryID: first the partition its
// key maps to, then the others. It returns ErrNotFound when no partition
// holds it.
func (s *Store) Find(ctx context.Context, topic, trajectoryID string) (*schemas.Sample, consumers.Record, error) {
	parts, err := s.Partitions(ctx, topic)
	if err != nil {
		return nil, consumers.Record{}, err
	}
	first := KeyPartition(trajectoryID, parts)
	order := []int{first}
	for _, p := range parts {
		if p != first {
			order = append(order, p)
		}
	}
	for _, p := range order {
		var found *schemas.Sample
		var at consumers.Record
		err := s.Scan(ctx, topic, p, func(smp *schemas.Sample, rec consumers.Record) bool {
			if smp.TrajectoryID == trajectoryID {
				found, at = smp, rec
				return false
			}
			return true
		})
		if err != nil {
			return nil, consumers.Record{}, err
		}
		if found != nil {
			return found, at, nil
		}
	}
	return nil, consumers.Record{}, fmt.Errorf("%w: %s in %s", ErrNotFound, trajectoryID, topic)
}

// Rank reads every sample of topic and returns the n best (OrderBest) or
// worst (OrderWorst) by ByReward or ByProcess; ties go to the earlier
// record (partitions in order, then offsets); a duplicate of a sample
// counts once. Memory is n refs.
func (s *Store) Rank(ctx context.Context, topic, order, by string, n int) ([]SampleRef, error) {
	parts, err := s.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	key := rewardKey
	if by == ByProcess {
		key = processKey
	}
	r := &ranked{max: n, key: key, high: order == OrderBest}
	var seq uint64
	for _, p := range parts {
		err := s.Scan(ctx, topic, p, func(smp *schemas.Sample, rec consumers.Record) bool {
			for i := range r.refs {
				if r.refs[i].TrajectoryID == smp.TrajectoryID {
					return true // a duplicate (at-least-once delivery)
				}
			}
			ref := refOf(topic, smp, rec.Partition, rec.Offset)
			seq++
			ref.seq = seq
			r.add(&ref)
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	return r.refs, nil
}
