package schemas

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/creditflow/creditflow/vocab"
)

// Limits bounds what a valid record may contain. Build it with
// DefaultLimits and override fields as needed.
type Limits struct {
	// VocabSize is the tokenizer's vocabulary size: every token id must be in
	// [0, VocabSize). Set it to the scorer model's vocab_size. <= 0 checks
	// only that ids are non-negative.
	VocabSize int
	// MaxTurns is the largest number of turns per trajectory.
	MaxTurns int
	// MaxTokens bounds the prompt plus all action and observation tokens of a
	// trajectory, and separately the gold target.
	MaxTokens int
	// MaxRecordBytes is the largest framed record a stage accepts
	// (see ValidateSize).
	MaxRecordBytes int
	// EligibleKinds are the turn kinds LAPO scores (docs/method.md §2.1; default
	// "search"). Validation accepts the four standard kinds plus these.
	EligibleKinds []string
	// Method, when set, is one more method name a scored record may carry
	// besides lapo and attnsr: the credit method the reading stage computes
	// (one registered with processors/credit). Such a record's turn scores
	// are empty or one per turn; the method's own checks are its own.
	Method string
}

// Default limits.
const (
	DefaultVocabSize      = 151936 // Qwen2/Qwen2.5 vocab_size; set Limits.VocabSize for other tokenizers
	DefaultMaxTurns       = 64
	DefaultMaxTokens      = 131072 // 128k-token agent trajectories (docs/kafka.md, "Long trajectories")
	DefaultMaxRecordBytes = 4 << 20
	maxIDBytes            = 1024
)

// DefaultLimits returns the default limits: vocabulary 151,936, 64 turns,
// 131,072 tokens, 4 MiB records, eligible kind "search".
func DefaultLimits() Limits {
	return Limits{
		VocabSize:      DefaultVocabSize,
		MaxTurns:       DefaultMaxTurns,
		MaxTokens:      DefaultMaxTokens,
		MaxRecordBytes: DefaultMaxRecordBytes,
		EligibleKinds:  []string{KindSearch},
	}
}

// KnownKind reports whether kind is a standard turn kind or one of
// lim.EligibleKinds.
func (lim Limits) KnownKind(kind string) bool {
	switch kind {
	case KindSearch, KindAnswer, KindTool, KindOther:
		return true
	}
	return slices.Contains(lim.EligibleKinds, kind)
}

// Eligible reports whether turns of this kind are LAPO-eligible kinds.
func (lim Limits) Eligible(kind string) bool {
	return slices.Contains(lim.EligibleKinds, kind)
}

// ValidateSize returns an *InvalidError with ReasonTooLarge when a framed
// record of n bytes exceeds lim.MaxRecordBytes (unchecked when <= 0).
func ValidateSize(n int, lim Limits) error {
	if lim.MaxRecordBytes > 0 && n > lim.MaxRecordBytes {
		return invalid(ReasonTooLarge, "record of %d bytes exceeds the %d-byte limit; raise MaxRecordBytes or split the trajectory", n, lim.MaxRecordBytes)
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// ValidateTrajectory checks a decoded trajectory and returns nil or an
// *InvalidError whose Reason is one of:
//
//   - ReasonInvalid: empty, over-long or non-UTF-8 ids, group_size < 1, sample_index < 0,
//     negative policy_version, no prompt, no turns, a turn without action
//     tokens, an unknown turn kind, rollout_logprobs not one finite value per
//     policy token, a temperature that is not finite and > 0;
//   - ReasonTooManyTurns, ReasonTooManyTokens: above lim.MaxTurns /
//     lim.MaxTokens;
//   - ReasonTokenOutOfRange: a token id outside [0, lim.VocabSize);
//   - ReasonBadSpan: gold span not 0 <= a < b <= len(gold_target) while a
//     gold target is present, or a non-zero span without one;
//   - ReasonNonFiniteReward: reward is NaN or infinite;
//   - ReasonMissingReward: neither a reward nor gold answers.
func ValidateTrajectory(t *Trajectory, lim Limits) error {
	if t == nil {
		return invalid(ReasonInvalid, "nil trajectory")
	}
	if t.TrajectoryID == "" || len(t.TrajectoryID) > maxIDBytes {
		return invalid(ReasonInvalid, "trajectory_id must be 1..%d bytes, got %d", maxIDBytes, len(t.TrajectoryID))
	}
	if t.PromptID == "" || len(t.PromptID) > maxIDBytes {
		return invalid(ReasonInvalid, "trajectory %s: prompt_id must be 1..%d bytes, got %d", t.TrajectoryID, maxIDBytes, len(t.PromptID))
	}
	if !utf8.ValidString(t.TrajectoryID) || !utf8.ValidString(t.PromptID) {
		return invalid(ReasonInvalid, "trajectory %q: trajectory_id and prompt_id must be valid UTF-8", t.TrajectoryID)
	}
	if t.GroupSize < 1 {
		return invalid(ReasonInvalid, "trajectory %s: group_size %d must be >= 1", t.TrajectoryID, t.GroupSize)
	}
	if t.SampleIndex < 0 {
		return invalid(ReasonInvalid, "trajectory %s: sample_index %d must be >= 0", t.TrajectoryID, t.SampleIndex)
	}
	if t.PolicyVersion < 0 {
		return invalid(ReasonInvalid, "trajectory %s: policy_version %d must be >= 0", t.TrajectoryID, t.PolicyVersion)
	}
	if len(t.Prompt) == 0 {
		return invalid(ReasonInvalid, "trajectory %s: empty prompt", t.TrajectoryID)
	}
	if len(t.Turns) == 0 {
		return invalid(ReasonInvalid, "trajectory %s: no turns", t.TrajectoryID)
	}
	if lim.MaxTurns > 0 && len(t.Turns) > lim.MaxTurns {
		return invalid(ReasonTooManyTurns, "trajectory %s: %d turns exceed the limit of %d", t.TrajectoryID, len(t.Turns), lim.MaxTurns)
	}
	total, policy := len(t.Prompt), 0
	for i, tu := range t.Turns {
		if !lim.KnownKind(tu.Kind) {
			return invalid(ReasonInvalid, "trajectory %s: turn %d has unknown kind %q (want search, answer, tool, other or a configured eligible kind)", t.TrajectoryID, i, tu.Kind)
		}
		if len(tu.Action) == 0 {
			return invalid(ReasonInvalid, "trajectory %s: turn %d has no action tokens", t.TrajectoryID, i)
		}
		total += len(tu.Action) + len(tu.Observation)
		policy += len(tu.Action)
	}
	if lim.MaxTokens > 0 && total > lim.MaxTokens {
		return invalid(ReasonTooManyTokens, "trajectory %s: %d tokens exceed the limit of %d", t.TrajectoryID, total, lim.MaxTokens)
	}
	if lim.MaxTokens > 0 && len(t.GoldTarget) > lim.MaxTokens {
		return invalid(ReasonTooManyTokens, "trajectory %s: gold target of %d tokens exceeds the limit of %d", t.TrajectoryID, len(t.GoldTarget), lim.MaxTokens)
	}
	if err := checkIDs(t.TrajectoryID, "prompt", t.Prompt, lim.VocabSize); err != nil {
		return err
	}
	for i, tu := range t.Turns {
		if err := checkIDs(t.TrajectoryID, "turn action", tu.Action, lim.VocabSize); err != nil {
			err.Detail += " (turn " + strconv.Itoa(i) + ")"
			return err
		}
		if err := checkIDs(t.TrajectoryID, "turn observation", tu.Observation, lim.VocabSize); err != nil {
			err.Detail += " (turn " + strconv.Itoa(i) + ")"
			return err
		}
	}
	if err := checkIDs(t.TrajectoryID, "gold_target", t.GoldTarget, lim.VocabSize); err != nil {
		return err
	}
	a, b := t.GoldSpan[0], t.GoldSpan[1]
	if len(t.GoldTarget) > 0 {
		if a < 0 || a >= b || int(b) > len(t.GoldTarget) {
			return invalid(ReasonBadSpan, "trajectory %s: gold span [%d, %d) is not a non-empty range inside the %d-token gold target", t.TrajectoryID, a, b, len(t.GoldTarget))
		}
	} else if a != 0 || b != 0 {
		return invalid(ReasonBadSpan, "trajectory %s: gold span [%d, %d) without a gold target", t.TrajectoryID, a, b)
	}
	if t.Reward != nil {
		if !finite(*t.Reward) {
			return invalid(ReasonNonFiniteReward, "trajectory %s: reward is %v", t.TrajectoryID, *t.Reward)
		}
	} else if len(t.GoldAnswers) == 0 {
		return invalid(ReasonMissingReward, "trajectory %s: no reward and no gold answers to compute one from", t.TrajectoryID)
	}
	if t.RolloutLogprobs != nil {
		if len(t.RolloutLogprobs) != policy {
			return invalid(ReasonInvalid, "trajectory %s: %d rollout log-probs for %d policy tokens", t.TrajectoryID, len(t.RolloutLogprobs), policy)
		}
		if !allFinite(t.RolloutLogprobs) {
			for i, lp := range t.RolloutLogprobs {
				if !finite(float64(lp)) {
					return invalid(ReasonInvalid, "trajectory %s: rollout log-prob %d is %v", t.TrajectoryID, i, lp)
				}
			}
		}
	}
	if t.Temperature != nil {
		if x := float64(*t.Temperature); !finite(x) || x <= 0 {
			return invalid(ReasonInvalid, "trajectory %s: temperature %v must be finite and > 0", t.TrajectoryID, x)
		}
	}
	return nil
}

func checkIDs(id, field string, ids []int32, vocab int) *InvalidError {
	if idsInRange(ids, vocab) {
		return nil
	}
	for i, x := range ids {
		if x < 0 || (vocab > 0 && int(x) >= vocab) {
			return invalid(ReasonTokenOutOfRange, "trajectory %s: %s token %d is id %d, outside [0, %d)", id, field, i, x, vocab)
		}
	}
	return nil
}

// idsInRange reports whether every id is in [0, vocab) ([0, 2³¹) for
// vocab <= 0) with no branch per id, four ids a step: a trajectory's ids
// are checked at every stage, and this loop runs at about twice the speed
// of one that tests each id in turn.
func idsInRange(ids []int32, vocab int) bool {
	if vocab <= 0 || vocab > math.MaxInt32 {
		var a, b, c, d int32 // the ids OR-ed together: negative iff one is
		for len(ids) >= 4 {
			a, b, c, d = a|ids[0], b|ids[1], c|ids[2], d|ids[3]
			ids = ids[4:]
		}
		for _, x := range ids {
			a |= x
		}
		return a|b|c|d >= 0
	}
	var a, b, c, d uint32 // the largest ids as uint32s: a negative id is >= 2³¹
	for len(ids) >= 4 {
		a, b, c, d = max(a, uint32(ids[0])), max(b, uint32(ids[1])), max(c, uint32(ids[2])), max(d, uint32(ids[3]))
		ids = ids[4:]
	}
	for _, x := range ids {
		a = max(a, uint32(x))
	}
	return max(a, b, c, d) < uint32(vocab)
}

// allFinite reports whether no value is NaN or ±Inf, from the exponent
// bits (all ones only for those), four values a step without a branch.
func allFinite(v []float32) bool {
	const exp = 0x7f800000
	var a, b, c, d uint32 // the largest exponent fields seen
	for len(v) >= 4 {
		a, b = max(a, math.Float32bits(v[0])&exp), max(b, math.Float32bits(v[1])&exp)
		c, d = max(c, math.Float32bits(v[2])&exp), max(d, math.Float32bits(v[3])&exp)
		v = v[4:]
	}
	for _, x := range v {
		a = max(a, math.Float32bits(x)&exp)
	}
	return max(a, b, c, d) != exp
}

// Scoring methods and directions carried by Scored records.
const (
	MethodLAPO        = string(vocab.LAPO)
	MethodAttnSR      = string(vocab.AttnSR)
	DirectionBackward = string(vocab.Backward)
	DirectionForward  = string(vocab.Forward)
)

// DirectionLabel is the direction of a LAPO Scored record scored with
// statistic (docs/method.md §2.4): the direction itself for logprob (""
// too), "<direction>:<statistic>" for entropy and kl.
func DirectionLabel(direction, statistic string) string {
	if statistic == "" || statistic == string(vocab.LogProb) {
		return direction
	}
	return direction + ":" + statistic
}

// SplitDirection reads a LAPO direction label: its direction (backward or
// forward) and statistic (logprob, entropy or kl); ok is false for anything
// else.
func SplitDirection(label string) (direction, statistic string, ok bool) {
	direction, statistic, found := strings.Cut(label, ":")
	if !found {
		statistic = string(vocab.LogProb)
	} else if st, err := vocab.ParseStatistic(statistic); err != nil || st == vocab.LogProb {
		return "", "", false
	}
	if direction != DirectionBackward && direction != DirectionForward {
		return "", "", false
	}
	return direction, statistic, true
}

// attentionSlack is how far a step-graph entry may fall below 0 or above 1
// (float round-off from the scorer).
const attentionSlack = 1e-4

// ValidateScored checks a scored record: its trajectory (as
// ValidateTrajectory), then, with ReasonInvalid: method is lapo or attnsr;
// lapo has direction backward or forward (optionally labelled with its
// statistic, see SplitDirection) and one TurnScore per turn whose
// present values are finite; attnsr turn scores are empty or aligned; every
// LayerGraph has K = number of turns, K*K finite entries in AA and AO within
// [0, 1] (small round-off allowed), and distinct layers; so does every
// LowerGraph, with K(K−1)/2 entries each; a record carries graphs in
// Attention or in Graphs, not both; attnsr with K >= 2 has at least one
// layer; truncations >= 0.
func ValidateScored(s *Scored, lim Limits) error {
	if s == nil {
		return invalid(ReasonInvalid, "nil scored record")
	}
	if err := ValidateTrajectory(&s.Trajectory, lim); err != nil {
		return err
	}
	id := s.Trajectory.TrajectoryID
	k := len(s.Trajectory.Turns)
	switch s.Method {
	case MethodLAPO:
		if _, _, ok := SplitDirection(s.Direction); !ok {
			return invalid(ReasonInvalid, "scored %s: lapo direction %q must be backward or forward, optionally followed by :entropy or :kl", id, s.Direction)
		}
		if len(s.Turns) != k {
			return invalid(ReasonInvalid, "scored %s: %d turn scores for %d turns", id, len(s.Turns), k)
		}
	case MethodAttnSR:
		if len(s.Turns) != 0 && len(s.Turns) != k {
			return invalid(ReasonInvalid, "scored %s: %d turn scores for %d turns", id, len(s.Turns), k)
		}
		if k >= 2 && len(s.Attention) == 0 && len(s.Graphs) == 0 {
			return invalid(ReasonInvalid, "scored %s: attnsr record with %d steps has no step graphs", id, k)
		}
	default:
		if s.Method == "" || s.Method != lim.Method {
			return invalid(ReasonInvalid, "scored %s: method %q must be lapo or attnsr", id, s.Method)
		}
		if len(s.Turns) != 0 && len(s.Turns) != k {
			return invalid(ReasonInvalid, "scored %s: %d turn scores for %d turns", id, len(s.Turns), k)
		}
	}
	for i, ts := range s.Turns {
		for _, v := range []struct {
			name string
			p    *float64
		}{{"delta", ts.Delta}, {"with", ts.With}, {"without", ts.Without}} {
			if v.p != nil && !finite(*v.p) {
				return invalid(ReasonInvalid, "scored %s: turn %d %s is %v", id, i, v.name, *v.p)
			}
		}
	}
	if len(s.Attention) > 0 && len(s.Graphs) > 0 {
		return invalid(ReasonInvalid, "scored %s: step graphs in both attention and graphs; a record carries them in one", id)
	}
	seen := make(map[int32]bool, len(s.Attention)+len(s.Graphs))
	for _, g := range s.Graphs {
		if err := validateLowerGraph(id, k, &g, seen); err != nil {
			return err
		}
	}
	for _, g := range s.Attention {
		if seen[g.Layer] {
			return invalid(ReasonInvalid, "scored %s: layer %d appears twice", id, g.Layer)
		}
		seen[g.Layer] = true
		if g.Layer < 0 {
			return invalid(ReasonInvalid, "scored %s: negative layer %d", id, g.Layer)
		}
		if int(g.K) != k {
			return invalid(ReasonInvalid, "scored %s: layer %d has K=%d for %d turns", id, g.Layer, g.K, k)
		}
		if len(g.AA) != k*k || len(g.AO) != k*k {
			return invalid(ReasonInvalid, "scored %s: layer %d has %d AA and %d AO entries, want K*K = %d", id, g.Layer, len(g.AA), len(g.AO), k*k)
		}
		for _, m := range [][]float64{g.AA, g.AO} {
			for j, x := range m {
				if !finite(x) || x < -attentionSlack || x > 1+attentionSlack {
					return invalid(ReasonInvalid, "scored %s: layer %d entry [%d,%d] is %v, want a probability mass in [0, 1]", id, g.Layer, j/k, j%k, x)
				}
			}
		}
	}
	if s.Truncations < 0 {
		return invalid(ReasonInvalid, "scored %s: negative truncation count %d", id, s.Truncations)
	}
	return nil
}
