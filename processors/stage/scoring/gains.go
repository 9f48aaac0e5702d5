package scoring

import (
	"context"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
)

// LAPORows returns the scoring rows the score stage sends for t
// (docs/method.md §2.1) and, per turn, the indexes into rows of its "with"
// and "without" score (-1 where the turn is not scored). The training data of
// the built-in model and the demo's offline measurements use it, so they see
// exactly the rows the stage scores.
func LAPORows(t *schemas.Trajectory, direction vocab.Direction, cc credit.Config, placeholder []int32) (rows []scorer.Row, with, without []int, err error) {
	p, err := PlanLAPO(t, direction, cc, placeholder)
	if err != nil {
		return nil, nil, nil, err
	}
	rows, err = p.expandedRows()
	if err != nil {
		return nil, nil, nil, err
	}
	return rows, p.with, p.without, nil
}

// Gains scores t's LAPO rows on scorer and returns its turn scores as the
// score stage would publish them (Delta nil where a turn is not scored).
func Gains(ctx context.Context, src scorer.Scorer, t *schemas.Trajectory, direction vocab.Direction, cc credit.Config, placeholder []int32) ([]schemas.TurnScore, error) {
	return GainsStatistic(ctx, src, t, direction, credit.StatLogProb, cc, placeholder)
}

// GainsStatistic is Gains with the LAPO statistic stat (docs/method.md §2.4).
func GainsStatistic(ctx context.Context, src scorer.Scorer, t *schemas.Trajectory, direction vocab.Direction, stat vocab.Statistic, cc credit.Config, placeholder []int32) ([]schemas.TurnScore, error) {
	p, err := PlanLAPOStatistic(t, direction, stat, cc, placeholder)
	if err != nil {
		return nil, err
	}
	if len(p.rows) == 0 {
		return make([]schemas.TurnScore, len(t.Turns)), nil
	}
	res, _, err := src.ScoreRows(ctx, []scorer.RowSet{p.RowSet(t.TrajectoryID)})
	if err != nil {
		return nil, err
	}
	ts, _ := p.TurnScores(res[0].Scores)
	return ts, nil
}
