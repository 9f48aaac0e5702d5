package gpu

import (
	"context"

	"github.com/creditflow/creditflow/gpu/model"
)

// Row, Step and StepGraph are the scorer's units of work (see package model).
type (
	Row       = model.Row
	Step      = model.Step
	StepGraph = model.StepGraph
)

// ModelInfo is what a scorer reports about the model it serves.
type ModelInfo struct {
	Protocol       string  `json:"protocol"` // ProtocolVersion
	Name           string  `json:"name"`
	Architecture   string  `json:"architecture"`
	Layers         int     `json:"layers"`
	VocabSize      int     `json:"vocab_size"`
	MaxContext     int     `json:"max_context"`
	PolicyVersion  int64   `json:"policy_version"`
	PlaceholderIDs []int32 `json:"placeholder_ids"`
	// Features lists the protocol features the server accepts within v1
	// (FeatureRowPieces); absent on servers from before them.
	Features []string `json:"features,omitempty"`
}

// RowSet is the LAPO rows of one trajectory. Rows of one set usually share a
// long prefix; a scorer computes shared prefixes once.
//
// Compact sets: when Pieces is not nil, row j with Pieces[j] != nil has no
// Context of its own; its context is its pieces, spans into Tokens or
// literal ids (the wire's compact rows, FeatureRowPieces). This keeps one
// copy of a trajectory instead of one per row; ExpandSet materializes it.
type RowSet struct {
	ID     string // caller's label (e.g. trajectory id), echoed in errors
	Rows   []Row
	Tokens []int32   // what span pieces point into
	Pieces [][]Piece // nil, or one entry per row (nil: the row's Context)
}

// RowScores answers one RowSet: Scores[i] is S for Rows[i].
type RowScores struct {
	Scores      []float64
	Truncations int // rows of the set whose context was cut from the left
	// PolicyVersion is the policy version of the weights that computed the
	// scores, when the scorer reports it (nil otherwise; then use
	// ModelInfo.PolicyVersion).
	PolicyVersion *int64
}

// AttentionJob asks for the step graphs of one trajectory on the given layers.
type AttentionJob struct {
	ID     string
	Tokens []int32
	Steps  []Step
	Layers []int
}

// AttentionVersioner is a Scorer that reports the policy version of the
// weights that computed a call's step graphs, -1 when unknown (Local and
// Client do; Server answers with it, the score stage records it).
type AttentionVersioner interface {
	AttentionVersion(ctx context.Context, jobs []AttentionJob) ([][]StepGraph, int64, error)
}

// Scorer is implemented by the in-process reference scorer (Local), by the
// protocol client (Client) that talks to scorer pods, and by nothing else.
// Results are in the order of the inputs.
type Scorer interface {
	Info(ctx context.Context) (ModelInfo, error)
	ScoreRows(ctx context.Context, sets []RowSet) ([]RowScores, error)
	Attention(ctx context.Context, jobs []AttentionJob) ([][]StepGraph, error)
}
