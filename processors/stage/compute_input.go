package stage

import (
	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/processors/stage/samples"
	"github.com/creditflow/creditflow/schemas"
)

// ComputeInput turns a scored record into the input object of
// `creditflow compute` (docs/offline.md), so a topic can be replayed
// offline and checked against the stream (samples.ComputeInput).
func ComputeInput(s *schemas.Scored) offline.Input { return samples.ComputeInput(s) }
