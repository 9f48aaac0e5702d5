package stage

import (
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/samples"
	"github.com/creditflow/creditflow/schemas"
)

// The short names the stage's tests use for package samples.

type sampleScratch = samples.Scratch

func member(s *schemas.Scored) credit.Member { return samples.Member(s) }

func sample(s *schemas.Scored, m credit.Member, r credit.Result, cfg credit.Config, sc *sampleScratch) schemas.Sample {
	return samples.Build(s, m, r, cfg, sc)
}
