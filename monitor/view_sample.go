package monitor

import (
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/tokenizer"
)

// SampleView is one sample laid out for reading: GET
// /api/v1/samples/{trajectory_id} and `creditflow inspect --json`. Every
// per-token array is aligned with Tokens.
type SampleView struct {
	SampleRef
	Partial             bool     `json:"partial"`
	Source              *string  `json:"source"`
	Temperature         *float32 `json:"temperature"`
	ScorerPolicyVersion *int64   `json:"scorer_policy_version"`
	// RecordTimeMs is the record's timestamp (when it was written), Unix ms.
	RecordTimeMs int64 `json:"record_time_ms"`
	// Tokenizer names the vocabulary Text was decoded with.
	Tokenizer string   `json:"tokenizer"`
	Tokens    []int32  `json:"tokens"`
	Text      []string `json:"text"`
	LossMask  []int    `json:"loss_mask"`
	// Advantages (output "advantages") or TokenRewards (output
	// "token_rewards"); the other is null.
	Advantages      []float32 `json:"advantages"`
	TokenRewards    []float32 `json:"token_rewards"`
	RolloutLogprobs []float32 `json:"rollout_logprobs"`
	// PromptEnd: tokens [0, PromptEnd) are the prompt.
	PromptEnd int        `json:"prompt_end"`
	Turns     []TurnView `json:"turns"`
	// TurnsExact is false when the token spans of the turns could not all
	// be told apart: the sample records no turn boundaries, only the loss
	// mask, so two turns with no observation between them form one run of
	// policy tokens, split where the tokens' advantages change from one
	// turn's value to the next's (when they are equal it cannot be split).
	TurnsExact bool        `json:"turns_exact"`
	AttnSR     *AttnSRView `json:"attnsr"`
}

// AttnSRView is an AttnSR sample's diagnostics (docs/method.md): C, F, Q,
// the EMA baseline R̄_t it used and its budget B_i.
type AttnSRView struct {
	Confidence float64 `json:"confidence"`
	Focus      float64 `json:"focus"`
	Consensus  float64 `json:"consensus"`
	Baseline   float64 `json:"baseline"`
	Budget     float64 `json:"budget"`
}

// TurnView is one turn: its token spans and its diagnostics.
type TurnView struct {
	Index    int    `json:"index"`
	Kind     string `json:"kind"`
	Eligible bool   `json:"eligible"`
	// Action and Observation are the turn's token spans [start, end) in
	// Tokens (an empty observation has start = end).
	Action      [2]int `json:"action"`
	Observation [2]int `json:"observation"`
	// LAPO: Δ, z = tanh(Δ/τ), z̃, gate, A_proc; null when not eligible.
	Delta            *float64 `json:"delta"`
	Z                *float64 `json:"z"`
	ZNorm            *float64 `json:"z_norm"`
	Gate             int32    `json:"gate"`
	ProcessAdvantage float64  `json:"process_advantage"`
	// Advantage is what the turn's policy tokens get (LAPO, AttnSR grpo).
	Advantage float64 `json:"advantage"`
	// AttnSR: p_k, s_{i,k} (null for the final turn), w̃.
	P          *float64 `json:"p"`
	StepReward *float64 `json:"step_reward"`
	Weight     *float64 `json:"weight"`
	// With and Without are the scorer's S with and without the turn
	// (backward LAPO; forward: S(c_≤t), S(c_<t)), read from the scored
	// topic when the monitor follows it; null otherwise.
	With    *float64 `json:"with"`
	Without *float64 `json:"without"`
}

// NewSampleView lays s out, decoding its tokens with dec (nil: the
// built-in byte vocabulary). rec locates it (partition −1: unknown).
func NewSampleView(topic string, s *schemas.Sample, partition int, offset int64, recordTimeMs int64, dec *tokenizer.Decoder) *SampleView {
	if dec == nil {
		dec = tokenizer.Bytes()
	}
	v := &SampleView{SampleRef: refOf(topic, s, partition, offset), Partial: s.Partial, Source: s.Source, Temperature: s.Temperature,
		ScorerPolicyVersion: s.ScorerPolicyVersion, RecordTimeMs: recordTimeMs, Tokenizer: dec.Kind(),
		Tokens: s.Tokens, Text: dec.Texts(s.Tokens), LossMask: make([]int, len(s.LossMask)),
		Advantages: s.Advantages, TokenRewards: s.TokenRewards, RolloutLogprobs: s.RolloutLogprobs}
	if a := s.AttnSR; a != nil {
		v.AttnSR = &AttnSRView{Confidence: a.Confidence, Focus: a.Focus, Consensus: a.Consensus, Baseline: a.Baseline, Budget: a.Budget}
	}
	for i, m := range s.LossMask {
		v.LossMask[i] = int(m)
	}
	v.PromptEnd, v.Turns, v.TurnsExact = segment(s)
	return v
}

// span is a run of policy tokens [a, b) and the off-policy tokens after
// it, [b, c).
type span struct{ a, b, c int }

// segment finds the prompt and each turn's action and observation in the
// token sequence from the loss mask (and, where two turns' actions touch,
// from the advantages).
func segment(s *schemas.Sample) (promptEnd int, turns []TurnView, exact bool) {
	n := len(s.LossMask)
	turns = make([]TurnView, len(s.Turns))
	for k := range s.Turns {
		d := &s.Turns[k]
		turns[k] = TurnView{Index: k, Kind: d.Kind, Eligible: d.Eligible, Delta: d.Delta, Z: d.Z, ZNorm: d.ZNorm, Gate: d.Gate,
			ProcessAdvantage: d.ProcessAdvantage, Advantage: d.Advantage, P: d.P, StepReward: d.StepReward, Weight: d.Weight}
	}
	for promptEnd < n && s.LossMask[promptEnd] == 0 {
		promptEnd++
	}
	var runs []span
	for i := promptEnd; i < n; {
		sp := span{a: i}
		for i < n && s.LossMask[i] != 0 {
			i++
		}
		sp.b = i
		for i < n && s.LossMask[i] == 0 {
			i++
		}
		sp.c = i
		runs = append(runs, sp)
	}
	K := len(turns)
	if K == 0 {
		return promptEnd, turns, len(runs) == 0
	}
	split := len(s.Advantages) == n && s.Output != "token_rewards"
	k := 0
	for ri, r := range runs {
		if k >= K {
			// More runs than turns: the rest belongs to the last turn.
			turns[K-1].Action[1], turns[K-1].Observation = r.b, [2]int{r.b, r.c}
			continue
		}
		turns[k].Action[0] = r.a
		start := r.a
		for i := r.a; i < r.b && split; i++ {
			// Move to the next turn where the tokens' advantage leaves this
			// turn's value for the next one's, keeping a turn for each run
			// still to come.
			if i > start && k+1 < K-(len(runs)-1-ri) && s.Advantages[i] != float32(s.Turns[k].Advantage) &&
				s.Advantages[i] == float32(s.Turns[k+1].Advantage) {
				turns[k].Action[1], turns[k].Observation = i, [2]int{i, i}
				k++
				turns[k].Action[0], start = i, i
			}
		}
		turns[k].Action[1], turns[k].Observation = r.b, [2]int{r.b, r.c}
		k++
	}
	exact = k == K && len(runs) <= K
	for ; k < K; k++ { // turns that could not be told apart: empty, at the end
		turns[k].Action = [2]int{n, n}
		turns[k].Observation = [2]int{n, n}
	}
	return promptEnd, turns, exact
}
