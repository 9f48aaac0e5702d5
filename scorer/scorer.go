package scorer

import (
	"context"
	"slices"
)

// Row is one LAPO scoring row (docs/method.md §2.1): the mean natural-log probability of
// Target[Span[0]:Span[1]] given Context followed by Target[:k], with the
// logits divided by Temperature before the softmax.
type Row struct {
	Context []int32
	Target  []int32
	Span    [2]int // half-open [a, b) into Target
	// Temperature is the rollout's sampling temperature, > 0; 0 means 1.
	// The LAPO reference scores the gold answer under the sampling
	// distribution, log softmax(logits / Temperature).
	Temperature float64
	// ReferenceContext is the second context of the kl statistic
	// (StatKL); other statistics ignore it.
	ReferenceContext []int32
}

// Step is one AttnSR step (docs/method.md §3.1): half-open token ranges into the
// trajectory's token array. An empty Observation range (start == end) means
// the step has no environment segment.
type Step struct {
	Action      [2]int
	Observation [2]int
}

// StepGraph holds G_AA and G_AO of one layer (docs/method.md §3.1), K×K, row j = querying
// step, column k; entries with k >= j are zero.
type StepGraph struct {
	Layer int
	AA    [][]float64
	AO    [][]float64
}

// Usage counts tokens: what was actually forwarded through the network, and
// what a row-by-row computation (each row alone, no prefix sharing) would forward.
type Usage struct {
	TokensForwarded int64
	TokensRowByRow  int64
	Truncations     int64 // rows whose context was cut from the left to fit MaxContext
}

// ModelInfo is what a scorer reports about the model it serves.
type ModelInfo struct {
	Protocol       string  `json:"protocol"` // protocol.Version
	Name           string  `json:"name"`
	Architecture   string  `json:"architecture"`
	Layers         int     `json:"layers"`
	VocabSize      int     `json:"vocab_size"`
	MaxContext     int     `json:"max_context"`
	PolicyVersion  int64   `json:"policy_version"`
	PlaceholderIDs []int32 `json:"placeholder_ids"`
	// Features lists the protocol features the server accepts within v1
	// (protocol.FeatureRowPieces, protocol.FeatureBinary,
	// FeatureStatistics); absent on servers from before them.
	Features []string `json:"features,omitempty"`
}

// SameModel reports whether a and b describe the same model: name,
// architecture, layers, vocabulary, max context and placeholder ids (the
// policy version may differ: it names the weights, not the model).
func (a ModelInfo) SameModel(b ModelInfo) bool {
	return a.Name == b.Name && a.Architecture == b.Architecture && a.Layers == b.Layers &&
		a.VocabSize == b.VocabSize && a.MaxContext == b.MaxContext && slices.Equal(a.PlaceholderIDs, b.PlaceholderIDs)
}

// RowSet is the LAPO rows of one trajectory. Rows of one set usually share a
// long prefix; a scorer computes shared prefixes once.
//
// Compact sets: when Pieces is not nil, row j with Pieces[j] != nil has no
// Context of its own; its context is its pieces, spans into Tokens or
// literal ids (the wire's compact rows, protocol.FeatureRowPieces). This keeps one
// copy of a trajectory instead of one per row; ExpandSet materializes it.
//
// Statistic chooses what every row of the set is answered with: "" or
// StatLogProb S (the default), StatEntropy or StatKL (whose rows carry a
// ReferenceContext, always as tokens); only scorers that advertise
// FeatureStatistics answer the last two.
type RowSet struct {
	ID        string // caller's label (e.g. trajectory id), echoed in errors
	Rows      []Row
	Tokens    []int32   // what span pieces point into
	Pieces    [][]Piece // nil, or one entry per row (nil: the row's Context)
	Statistic string    // "", StatLogProb, StatEntropy or StatKL
}

// RowScores answers one RowSet: Scores[i] is the set's statistic (S by
// default) for Rows[i].
type RowScores struct {
	Scores      []float64
	Truncations int // rows of the set whose context was cut from the left
	// PolicyVersion is the policy version of the weights that computed the
	// scores, when the scorer reports it (nil otherwise; then use
	// ModelInfo.PolicyVersion).
	PolicyVersion *int64
}

// Scorer is implemented by the in-process reference scorer (package local),
// by the protocol client (package client) that talks to scorer pods, and by
// fixtures that stand in for a model in tests and benchmarks. Results are in
// the order of the inputs. Every Scorer answers every method: a caller never
// asks which optional methods a scorer has.
type Scorer interface {
	Info(ctx context.Context) (ModelInfo, error)
	// ScoreRows answers every set, and what the call cost in tokens: zero
	// where the scorer does not count it (the client coalesces the calls
	// of many callers into one request, so it counts the pods' usage in
	// its metrics, not per call).
	ScoreRows(ctx context.Context, sets []RowSet) ([]RowScores, Usage, error)
	// Attention computes the step graphs of every job, in the form opts
	// asks for, and reports the policy version of the weights that
	// computed them (AttentionResult).
	Attention(ctx context.Context, jobs []AttentionJob, opts AttentionOptions) (AttentionResult, error)
}
