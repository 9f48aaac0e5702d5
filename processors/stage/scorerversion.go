package stage

import (
	"context"

	"github.com/creditflow/creditflow/gpu"
)

// attention asks the scorer for one job's step graphs and, when the scorer
// reports it, the policy version of the weights that computed them (-1 when
// it does not).
func attention(ctx context.Context, scorer gpu.Scorer, job gpu.AttentionJob) ([][]gpu.StepGraph, int64, error) {
	if av, ok := scorer.(gpu.AttentionVersioner); ok {
		return av.AttentionVersion(ctx, []gpu.AttentionJob{job})
	}
	g, err := scorer.Attention(ctx, []gpu.AttentionJob{job})
	return g, -1, err
}
