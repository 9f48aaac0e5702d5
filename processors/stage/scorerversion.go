package stage

import (
	"context"

	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
)

// attention asks the scorer for one job's step graphs in the scored
// record's compact form and, when the scorer reports it, the policy version
// of the weights that computed them (-1 when it does not). A scorer that
// hands compact graphs (the client) is asked for them; the graphs of any
// other are cut here, by the same rule.
func attention(ctx context.Context, src scorer.Scorer, job scorer.AttentionJob) ([]schemas.LowerGraph, int64, error) {
	jobs := []scorer.AttentionJob{job}
	if la, ok := src.(scorer.LowerAttentioner); ok {
		g, v, err := la.AttentionLower(ctx, jobs)
		if err != nil {
			return nil, -1, err
		}
		return g[0], v, nil
	}
	var (
		g   [][]scorer.StepGraph
		v   = int64(-1)
		err error
	)
	if av, ok := src.(scorer.AttentionVersioner); ok {
		g, v, err = av.AttentionVersion(ctx, jobs)
	} else {
		g, err = src.Attention(ctx, jobs)
	}
	if err != nil {
		return nil, -1, err
	}
	return scoring.LowerGraphs(g[0]), v, nil
}
