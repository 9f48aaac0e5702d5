package schemas

// Turn kinds (docs/method.md, "Words").
const (
	KindSearch = "search"
	KindAnswer = "answer"
	KindTool   = "tool"
	KindOther  = "other"
)

// Turn is one assistant segment, optionally followed by one environment segment.
type Turn struct {
	Kind        string  // KindSearch | KindAnswer | KindTool | KindOther
	Action      []int32 // assistant (policy) token ids
	Observation []int32 // environment token ids; empty when the turn has none
}

// Trajectory is what rollout workers publish (topic "trajectories", key prompt_id).
type Trajectory struct {
	TrajectoryID  string
	PromptID      string
	GroupSize     int32
	SampleIndex   int32
	PolicyVersion int64
	CreatedAtMs   int64 // rollout worker's wall clock; drives event-time group windows
	Prompt        []int32
	Turns         []Turn
	Reward        *float64 // when nil: reward = best F1 of PredAnswer against GoldAnswers
	PredAnswer    *string
	GoldAnswers   []string
	GoldTarget    []int32  // scoring template with the first gold answer, tokenized (docs/method.md §2.1)
	GoldSpan      [2]int32 // [a, b) into GoldTarget: the tokens overlapping the gold answer
	// Optional pass-through for trainers' importance ratios: one log-prob per
	// policy token, in order over all turns' Action tokens. Nil when absent.
	RolloutLogprobs []float32
	Temperature     *float32
	// Source is the data source or task name (optional), carried into the
	// sample so monitors can split rewards by source. Nil when absent.
	Source *string
}

// TurnScore is the score stage's result for one turn.
// Backward LAPO: With = S(c_full), Without = S(c_−t), Delta = With − Without.
// Forward: With = S(c_≤t), Without = S(c_<t). Nil where the turn was not scored;
// With or Without is also nil where the scorer returned a non-finite score,
// and Delta is then 0.
type TurnScore struct {
	Delta   *float64
	With    *float64
	Without *float64
}

// LayerGraph is one layer's AttnSR step graph (docs/method.md §3.1), K×K row-major,
// row j = querying step, column k; zero where k >= j. Records of the
// generations before compact graphs carry their graphs so (Scored.Attention);
// the score stage now writes LowerGraphs (Scored.Graphs).
type LayerGraph struct {
	Layer int32
	K     int32
	AA    []float64
	AO    []float64
}

// Scored is what the score stage publishes (topic "scored", key prompt_id).
type Scored struct {
	Trajectory          Trajectory
	Method              string // a credit method's name (vocab.Method): lapo, attnsr or a registered one
	Direction           string // "backward" | "forward" (lapo)
	Turns               []TurnScore
	Attention           []LayerGraph
	ScorerModel         string
	ScorerPolicyVersion int64
	Truncations         int32
	ScoredAtMs          int64 // wall-clock metadata (excluded from determinism)
	// Graphs are the step graphs below their diagonals (the compact form
	// the score stage writes); a record carries its graphs either here or,
	// as records written before the field existed do, in Attention.
	// StepGraphs gives either as LowerGraphs.
	Graphs []LowerGraph
}

// TurnDiag is the per-turn diagnostics of a sample (docs/offline.md output "turns").
type TurnDiag struct {
	Kind             string
	Eligible         bool
	Delta            *float64 // LAPO: nil when not eligible
	Z                *float64
	ZNorm            *float64
	Gate             int32
	ProcessAdvantage float64
	Advantage        float64  // what this turn's assistant tokens get (LAPO, AttnSR grpo)
	P                *float64 // AttnSR: nil for the final turn
	StepReward       *float64
	Weight           *float64 // AttnSR grpo: w̃ of this turn's tokens
}

// AttnSRDiag is the per-trajectory AttnSR diagnostics.
type AttnSRDiag struct {
	Confidence float64
	Focus      float64
	Consensus  float64
	Baseline   float64 // R̄_t used for this trajectory
	Budget     float64 // B_i
}

// Sample is one ready-to-train record (topic "samples", key prompt_id).
type Sample struct {
	TrajectoryID     string
	PromptID         string
	GroupSize        int32
	SampleIndex      int32
	PolicyVersion    int64
	CreatedAtMs      int64
	Method           string // a credit method's name (vocab.Method): lapo, attnsr or a registered one
	Output           string // "advantages" (lapo, attnsr grpo) | "token_rewards" (attnsr ppo)
	Partial          bool
	Reward           float64
	OutcomeAdvantage float64
	Tokens           []int32   // prompt + turns (action, observation) in order
	LossMask         []uint8   // 1 on policy tokens
	Advantages       []float32 // per token; 0 where LossMask is 0
	TokenRewards     []float32 // attnsr ppo only; nil otherwise
	RolloutLogprobs  []float32 // aligned with Tokens (0 outside policy tokens); nil when absent
	Temperature      *float32
	Turns            []TurnDiag
	AttnSR           *AttnSRDiag
	// ScorerPolicyVersion is the scorer's policy version, copied from
	// Scored; nil in samples written before the field existed.
	ScorerPolicyVersion *int64
	Source              *string // copied from the trajectory; nil when absent
}

// PolicyAnnouncement is a trainer's announcement of a new policy version
// (compacted topic "policy", key PolicyKey). Readers take the maximum
// Version seen as the newest announced version.
type PolicyAnnouncement struct {
	Version       int64
	Checkpoint    string // folder path or URI of the weights; "" when not published
	AnnouncedAtMs int64  // wall clock, Unix milliseconds
}

// PolicyKey is the constant key of every policy announcement, so a
// compacted topic keeps the newest one.
const PolicyKey = "policy"

// DeadLetter is a record the processor could not use (topic "dead-letters").
type DeadLetter struct {
	Reason    string // a Reason* code
	Detail    string
	Stage     string // "score" | "advantage"
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // the original bytes
	AtMs      int64  // wall-clock metadata
}

// Dead-letter reasons. Each is a stable, documented code.
const (
	ReasonUndecodable       = "undecodable"
	ReasonUnknownSchema     = "unknown_schema"
	ReasonBadSpan           = "bad_span"
	ReasonTokenOutOfRange   = "token_out_of_range"
	ReasonNonFiniteReward   = "non_finite_reward"
	ReasonMissingReward     = "missing_reward" // no reward and no gold answers
	ReasonTooManyTurns      = "too_many_turns"
	ReasonTooManyTokens     = "too_many_tokens"
	ReasonTooLarge          = "too_large"
	ReasonInvalid           = "invalid" // other field-level inconsistencies (empty ids, bad kind, ...)
	ReasonGroupSizeMismatch = "group_size_mismatch"
	ReasonGroupIncomplete   = "group_incomplete"
	ReasonLate              = "late"
	ReasonScorerRejected    = "scorer_rejected"  // the scorer refused the record's rows as invalid
	ReasonChunkIncomplete   = "chunk_incomplete" // a record written as chunks lost chunks (consumers.ReasonChunkIncomplete)
	ReasonChunkCorrupt      = "chunk_corrupt"    // chunk headers or reassembled bytes do not check out (consumers.ReasonChunkCorrupt)
	ReasonUnencodable       = "unencodable"      // the advantage stage could not encode the member's sample (an internal fault; the scored record is kept)
)
