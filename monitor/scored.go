package monitor

import (
	"context"
	"errors"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/schemas"
)

// scoredSlack is how long before its trajectory's created_at_ms a scored
// record is looked for (clocks of workers and brokers differ).
const scoredSlack = time.Minute

// maxScoredScan bounds the records of the scored topic read for one
// sample view.
const maxScoredScan = 200_000

// scoredView adds each turn's S with and without the turn, read from the
// scored topic (Source.Scored), to v. The scored record is keyed by
// prompt_id: only its key's partition is read, from the first record
// written a minute before the trajectory was created, and only records
// with that key are decoded. When the topic is not followed or the record
// is not found, v is returned as it was.
func (m *Monitor) scoredView(ctx context.Context, v *SampleView) *SampleView {
	if m.src.Scored == "" {
		return v
	}
	sc, err := m.store().FindScored(ctx, m.src.Scored, v.PromptID, v.TrajectoryID, time.UnixMilli(v.CreatedAtMs).Add(-scoredSlack))
	if err != nil {
		m.log.Debug().Err(err).Str("trajectory_id", v.TrajectoryID).Msg("monitor: no scored record for the sample view")
		return v
	}
	v.AddScored(sc)
	return v
}

// AddScored copies the scorer's S with and without each turn from sc (the
// scored record of v's trajectory) into v's turns.
func (v *SampleView) AddScored(sc *schemas.Scored) {
	if len(sc.Turns) != len(v.Turns) {
		return
	}
	for k := range v.Turns {
		v.Turns[k].With, v.Turns[k].Without = sc.Turns[k].With, sc.Turns[k].Without
	}
}

// FindScored reads topic (a scored topic, keyed by prompt_id) for the
// scored record of trajectoryID, from the first record written at or
// after since in promptID's partition, up to the partition's end as of the
// call and at most maxScoredScan records. It returns ErrNotFound when it is
// not there.
func (s *Store) FindScored(ctx context.Context, topic, promptID, trajectoryID string, since time.Time) (*schemas.Scored, error) {
	parts, err := s.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	p := KeyPartition(promptID, parts)
	d, err := s.Security.Dialer()
	if err != nil {
		return nil, err
	}
	from, err := offsetAt(ctx, d, s.Brokers, topic, p, since)
	if err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, ErrNotFound
	}
	var found *schemas.Scored
	n := 0
	ch := newChunks() // scored records with attention graphs can be written as chunks
	_, err = consumers.ReadPartitionRange(ctx, s.Brokers, s.Security, topic, p, from, func(raw consumers.Record) error {
		if n++; n > maxScoredScan {
			return errStop
		}
		if string(raw.Key) != promptID { // every chunk carries its record's key
			return nil
		}
		rec, _ := ch.add(raw)
		if rec == nil {
			return nil
		}
		sc, err := schemas.ScoredRecords().Decode(rec.Value)
		if err == nil && sc.Trajectory.TrajectoryID == trajectoryID {
			found = sc
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if found == nil {
		return nil, ErrNotFound
	}
	return found, nil
}
