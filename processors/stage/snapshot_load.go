package stage

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// snapshotWindow is the first window (in records) loadSnapshot reads back
// from the end of a state partition; it doubles until the key is found.
const snapshotWindow = 16

// loadSnapshot finds the newest snapshot written under key on the state
// topic.
//
// Snapshots are written with the key's partitioner (murmur2, like every
// keyed record), so with n state partitions a key's snapshots all sit in
// partition PartitionFor(key, n). The key names the input partition, not
// its owner, so it is the same partition after any rebalance or restart,
// whichever replica writes or reads it. Only that partition is read, and
// backwards from its end (consumers.LastMatch): the newest snapshot of the
// key is found at the cost of the snapshots written after it (other input
// partitions' keys sharing the state partition), however long the topic has
// grown and whether or not compaction has run.
//
// When the key is not there and the topic has more than one partition, the
// others are read too: partitions added to the state topic move keys, and
// the snapshots written before lie where the old count put them. Of the
// copies found, the one furthest ahead (NextOffset, then the more groups
// emitted ahead) is restored; the next snapshot goes where the key hashes
// now, so later loads find it there.
func (a *AdvantageStage) loadSnapshot(ctx context.Context, key string) (*state.Snapshot, error) {
	topic := a.cfg.Topics.State
	parts, err := consumers.Partitions(ctx, a.cfg.Brokers, a.cfg.Security, topic)
	if err != nil {
		return nil, fmt.Errorf("advantage stage: state topic %s: %w", topic, err)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("advantage stage: state topic %s has no partitions (create it, or run with --create-topics)", topic)
	}
	sort.Ints(parts)
	home := parts[producers.PartitionFor([]byte(key), len(parts))]
	read := func(p int) ([]byte, error) {
		start := time.Now()
		last, _, n, err := consumers.LastMatch(ctx, a.cfg.Brokers, a.cfg.Security, topic, p, snapshotWindow, func(r consumers.Record) bool {
			return string(r.Key) == key
		})
		if err != nil {
			return nil, fmt.Errorf("advantage stage: read state topic %s partition %d: %w", topic, p, err)
		}
		a.log.Debug().Str("key", key).Int("state_partition", p).Int64("records_read", n).
			Dur("took", time.Since(start)).Bool("found", last.Value != nil).Msg("state snapshot lookup")
		return last.Value, nil
	}
	last, err := read(home)
	if err != nil || len(last) > 0 {
		if err != nil {
			return nil, err
		}
		return state.UnmarshalSnapshot(last)
	}
	var best *state.Snapshot
	bestAt := -1
	for _, p := range parts {
		if p == home {
			continue
		}
		b, err := read(p)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			continue
		}
		s, err := state.UnmarshalSnapshot(b)
		if err != nil {
			return nil, err
		}
		if best == nil || s.NextOffset > best.NextOffset || (s.NextOffset == best.NextOffset && len(s.Emitted) > len(best.Emitted)) {
			best, bestAt = s, p
		}
	}
	if best != nil {
		a.log.Warn().Str("key", key).Int("found_in", bestAt).Int("expected_in", home).Int("state_partitions", len(parts)).
			Msg("state snapshot found outside the partition its key hashes to (were partitions added to the state topic?); restored, and written to the expected partition from now on")
	}
	return best, nil
}
