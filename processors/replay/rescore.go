package replay

import (
	"context"
	"fmt"
	"os"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
)

// recordStatistic is the LAPO statistic a scored record was measured with
// ("" for records of another method or an unreadable label).
func recordStatistic(s *schemas.Scored) string {
	if s.Method != schemas.MethodLAPO {
		return ""
	}
	_, stat, _ := schemas.SplitDirection(s.Direction)
	return stat
}

// Rescore writes every record of cfg.Topics.Scored up to ends to out:
// a LAPO record whose statistic is not cfg.LAPOStatistic is scored again
// with it (its trajectory is in the record), every other record is copied
// as it is. A record the scorer rejects is reported on stderr and left out.
// It returns the records written and re-scored.
func Rescore(ctx context.Context, cfg stage.Config, src scorer.Scorer, prod *producers.Producer, ends map[int]int64, out string) (written, rescored int, err error) {
	sc, err := stage.NewScoreStage(ctx, cfg, src, prod)
	if err != nil {
		return 0, 0, err
	}
	header := []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.ScoredRecords().Name())}}
	for p := 0; p < len(ends); p++ {
		var msgs []producers.Message
		err := EachScored(ctx, cfg, p, ends[p], func(rec consumers.Record, s *schemas.Scored) error {
			value := rec.Value
			if stat := recordStatistic(s); stat != "" && vocab.Statistic(stat) != cfg.LAPOStatistic {
				n, err := sc.Rescore(ctx, s)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					// transient failures were retried: this record cannot be scored
					fmt.Fprintf(os.Stderr, "partition %d offset %d: trajectory %s: %v (skipped)\n", p, rec.Offset, s.Trajectory.TrajectoryID, err)
					return nil
				}
				if value, err = schemas.ScoredRecords().Encode(n); err != nil {
					return err
				}
				rescored++
			}
			msgs = append(msgs, producers.Message{Topic: out, Key: rec.Key, Value: value, Headers: header})
			written++
			if len(msgs) >= 256 {
				err := prod.Produce(ctx, msgs...)
				msgs = msgs[:0]
				return err
			}
			return nil
		})
		if err == nil && len(msgs) > 0 {
			err = prod.Produce(ctx, msgs...)
		}
		if err != nil {
			return written, rescored, err
		}
	}
	return written, rescored, nil
}
