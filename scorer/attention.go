package scorer

// Attention's work and answer: the step graphs of AttnSR (docs/method.md
// §3.1), K×K or below their diagonal (docs/scorer-protocol.md, "Lower
// graphs").

import "github.com/creditflow/creditflow/internal/stepgraph"

// AttentionJob asks for the step graphs of one trajectory on the given layers.
type AttentionJob struct {
	ID     string
	Tokens []int32
	Steps  []Step
	Layers []int
}

// LowerGraph is a step graph below its diagonal, in the scored record's
// compact form (the entries k < j only, and their sums G_AA + G_AO where
// that is exact; stepgraph.Cut is the rule).
type LowerGraph = stepgraph.Lower

// AttentionOptions chooses the form of an Attention answer.
type AttentionOptions struct {
	// Lower asks for every graph below its diagonal (AttentionResult.Lower),
	// the form the score stage records, instead of K×K
	// (AttentionResult.Graphs). The bits are those of the K×K graphs cut by
	// stepgraph.Cut, whoever cuts them: the client reads the pods'
	// lower-graphs answer (protocol.MediaTypeLowerGraphs, a quarter of the
	// bytes) where they give one and cuts a K×K answer itself where not.
	Lower bool
}

// AttentionResult answers one Attention call: for each job, in the order
// of the jobs, one graph per requested layer, in the order of its Layers.
type AttentionResult struct {
	Graphs [][]StepGraph  // the K×K graphs; nil when Lower was asked
	Lower  [][]LowerGraph // the graphs below their diagonals; nil unless Lower was asked
	// PolicyVersion is the policy version of the weights that computed the
	// graphs (the oldest, when the client sent the jobs in several
	// requests), -1 when the scorer does not know it. The server answers
	// with it; the score stage records it.
	PolicyVersion int64
}

// NewAttentionResult is the answer of a scorer that computes K×K graphs
// (one slice per job) with the weights of policy version (-1: unknown) to a
// call with opts: the graphs themselves or, when opts.Lower, each job's
// graphs cut by CutGraphs.
func NewAttentionResult(opts AttentionOptions, graphs [][]StepGraph, version int64) AttentionResult {
	if !opts.Lower {
		return AttentionResult{Graphs: graphs, PolicyVersion: version}
	}
	lower := make([][]LowerGraph, len(graphs))
	for i, g := range graphs {
		lower[i] = CutGraphs(g)
	}
	return AttentionResult{Lower: lower, PolicyVersion: version}
}

// CutGraphs is one job's K×K graphs below their diagonals (stepgraph.Cut),
// nil for none. A graph that is not K×K gets no panic here, only a cut that
// the advantage stage refuses.
func CutGraphs(gs []StepGraph) []LowerGraph {
	if len(gs) == 0 {
		return nil
	}
	out := make([]LowerGraph, len(gs))
	for i, g := range gs {
		out[i] = stepgraph.Cut(g.Layer, g.AA, g.AO)
	}
	return out
}
