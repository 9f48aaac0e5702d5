package stage

import (
	"context"
	"fmt"

	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
)

// attention asks the scorer for one job's step graphs in the scored
// record's compact form (scorer.AttentionOptions.Lower) and the policy
// version of the weights that computed them (-1 when the scorer does not
// know it).
func attention(ctx context.Context, src scorer.Scorer, job scorer.AttentionJob) ([]schemas.LowerGraph, int64, error) {
	res, err := src.Attention(ctx, []scorer.AttentionJob{job}, scorer.AttentionOptions{Lower: true})
	if err != nil {
		return nil, -1, err
	}
	if len(res.Lower) != 1 {
		return nil, -1, fmt.Errorf("scorer answered %d jobs for 1", len(res.Lower))
	}
	return res.Lower[0], res.PolicyVersion, nil
}
