package bench

import (
	"context"
	"errors"
	"slices"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
)

// A stage's floor (docs/performance.md, Method): a passthrough that reads
// the stage's input and writes, for each record, one of the records the
// stage wrote (whole: all its chunks where it was chunked), with the stages'
// producer settings and the passthrough's batching. It is what any stage
// costs that reads these records and writes those, before it decodes,
// groups, scores, computes or encodes anything; its rate over the
// passthrough's bounds the stage's ratio from above for the record formats
// as they are. The score floor writes scored records per trajectory, the
// advantage floor samples per scored record.

// floorRecords is how many distinct output records a floor phase cycles
// through: enough that a produce batch of 256 never repeats one (no
// cross-record redundancy for the codec), few enough that holding them
// (8.7 MB of search-QA samples) does not change the bench process's
// collector.
const floorRecords = 512

// floorRecord is one record as a stage wrote it: its messages (one, or its
// chunks in order), each with its key, value and headers.
type floorRecord []producers.Message

// readFloorRecords reads about floorRecords records of topic, as many of
// each partition, a chunked record's chunks put back under it (by checksum and
// the chunk header's count; chunks of one record are written in order). The
// partitions' records alternate, so that their keys spread over the
// partitions as the stage's output does.
func (e *benchEnv) readFloorRecords(ctx context.Context, topic string) ([]floorRecord, error) {
	parts, err := consumers.Partitions(ctx, e.brokers, benchSec, topic)
	if err != nil || len(parts) == 0 {
		return nil, err
	}
	per := make([][]floorRecord, len(parts))
	for i, p := range parts {
		open := map[string]floorRecord{}
		_, err := consumers.ReadPartitionRange(ctx, e.brokers, benchSec, topic, p, -2, func(r consumers.Record) error {
			if len(per[i]) >= floorRecords/len(parts) {
				return errEnough // the rest of the partition is not read
			}
			m := producers.Message{Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers)}
			info, chunked, err := chunk.Parse(r.Headers)
			if err != nil || !chunked {
				per[i] = append(per[i], floorRecord{m})
				return nil
			}
			k := info.Of // chunks of one record share its key and its checksum
			rec := append(open[k], m)
			if len(rec) < info.Count {
				open[k] = rec
				return nil
			}
			delete(open, k)
			per[i] = append(per[i], rec)
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			return nil, err
		}
	}
	var out []floorRecord
	for j := 0; ; j++ {
		n := len(out)
		for _, recs := range per {
			if j < len(recs) {
				out = append(out, recs[j])
			}
		}
		if len(out) == n {
			return out, nil
		}
	}
}

// errEnough stops reading a partition once its share of records is in.
var errEnough = errors.New("enough records")

// floor runs a floor phase: the records of in read (with the read buffer of
// the passthrough it is compared with), one of recs (in turn) written per
// record; with inputKey under the record's own key, as the score stage keys
// a scored record like its trajectory (the advantage stage keys a sample by
// its trajectory: recs' own keys).
func (e *benchEnv) floor(ctx context.Context, phase, in string, buffer int, recs []floorRecord, inputKey bool, want int) (rate, error) {
	out := e.name(phase + "-out")
	return e.mover(ctx, phase, in, out, buffer, 1, want, nil, floorWriter(out, recs, inputKey))
}

// floorWriter appends the messages of the seq-th record's output: recs in
// turn, each whole (all its chunks), under the input record's key with
// inputKey.
func floorWriter(topic string, recs []floorRecord, inputKey bool) func([]producers.Message, consumers.Record, int) []producers.Message {
	return func(msgs []producers.Message, in consumers.Record, seq int) []producers.Message {
		for _, m := range recs[seq%len(recs)] {
			m.Topic = topic
			if inputKey {
				m.Key = in.Key
			}
			msgs = append(msgs, m)
		}
		return msgs
	}
}
