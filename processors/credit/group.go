package credit

import (
	"fmt"
	"math"
	"sort"
)

// Turn is one turn of a scored trajectory as the group computation sees it:
// its kind, its segment lengths in tokens, and the LAPO raw gain Δ (nil where
// the score stage scored nothing).
type Turn struct {
	Kind              string
	ActionTokens      int
	ObservationTokens int
	Delta             *float64
}

// LayerGraph is one layer's AttnSR step graph (docs/method.md §3.1): AA and AO have
// K rows, row j = querying step, column k = attended step; a row holds
// either all K columns or only the j left of the diagonal (the entries with
// k ≥ j are ignored, so they may be left out).
//
// Sum, when set, holds G_AA + G_AO entry by entry in the same layout, and AA
// and AO are empty (the sum form of docs/wire-format.md): AttnSR reads the
// pair only as G = 0.5·G_AA + 0.5·G_AO and as G_AA + G_AO, and computes G
// as 0.5·Sum from it.
type LayerGraph struct {
	Layer  int
	AA, AO [][]float64
	Sum    [][]float64
}

// Member is one scored trajectory of a group.
type Member struct {
	TrajectoryID, PromptID string
	GroupSize              int
	// Reward is R_i; nil → best F1 of PredAnswer against GoldAnswers (docs/method.md §1).
	Reward       *float64
	PredAnswer   *string
	GoldAnswers  []string
	PromptTokens int
	Turns        []Turn
	// Attention holds the AttnSR step graphs, one per selected layer.
	Attention []LayerGraph
}

// TurnResult is the per-turn output (docs/offline.md "turns").
type TurnResult struct {
	// LAPO.
	Eligible         bool
	Delta, Z, ZNorm  *float64 // nil when not eligible
	Gate             int      // 1 when Δ and z̃ have the same strict sign (reported with gating on or off)
	ProcessAdvantage float64  // A_proc (0 when not eligible)
	// Advantage is what this turn's assistant tokens get: LAPO
	// A_out + λ·A_proc (eligible) or A_out; AttnSR grpo A'_u; 0 for AttnSR ppo.
	Advantage float64
	// AttnSR: P and StepReward are nil for the final turn; Weight (w̃) is
	// nil for the ppo output.
	P, StepReward, Weight *float64
}

// AttnSRResult is the per-trajectory AttnSR diagnostics.
type AttnSRResult struct {
	Confidence, Focus, Consensus float64
	Baseline                     float64 // R̄_t of the batch (group) that holds the trajectory
	Budget                       float64 // B_i
}

// Result is the output for one member.
type Result struct {
	TrajectoryID, PromptID string
	Partial                bool
	Reward                 float64 // R_i
	OutcomeAdvantage       float64 // A_out_i
	Turns                  []TurnResult
	AttnSR                 *AttnSRResult // nil for LAPO
}

// ValidateMember reports the first field of m that the group computation
// cannot use under cfg: empty ids, no turns, negative lengths, unknown
// kinds, a non-finite reward, no reward and no gold answers, and for AttnSR
// missing or mis-shaped graphs and graph entries below the diagonal that
// are negative or not finite.
func ValidateMember(m Member, cfg Config) error {
	id := m.TrajectoryID
	if id == "" {
		return fmt.Errorf("credit: trajectory_id is empty; every trajectory needs a unique id")
	}
	if m.PromptID == "" {
		return fmt.Errorf("credit: trajectory %q: prompt_id is empty; it is the group key", id)
	}
	if m.PromptTokens < 0 {
		return fmt.Errorf("credit: trajectory %q: prompt_tokens = %d is negative", id, m.PromptTokens)
	}
	if len(m.Turns) == 0 {
		return fmt.Errorf("credit: trajectory %q has no turns; a trajectory needs at least its final turn", id)
	}
	for t, turn := range m.Turns {
		if !KnownKind(turn.Kind) {
			return fmt.Errorf("credit: trajectory %q turn %d: kind %q is unknown; use search, answer, tool or other", id, t, turn.Kind)
		}
		if turn.ActionTokens < 0 || turn.ObservationTokens < 0 {
			return fmt.Errorf("credit: trajectory %q turn %d: negative token count (action %d, observation %d)", id, t, turn.ActionTokens, turn.ObservationTokens)
		}
	}
	if m.Reward != nil {
		if math.IsNaN(*m.Reward) || math.IsInf(*m.Reward, 0) {
			return fmt.Errorf("credit: trajectory %q: reward %v is not finite", id, *m.Reward)
		}
	} else if len(m.GoldAnswers) == 0 {
		return fmt.Errorf("credit: trajectory %q has neither a reward nor gold answers to score pred_answer against", id)
	}
	if method, ok := Lookup(cfg.Method); ok && method.Validate != nil {
		return method.Validate(m, cfg)
	}
	return nil
}

// validateAttention is AttnSR's member check: step graphs for K >= 2
// steps, each layer K rows of K entries (or the j left of the diagonal),
// pairs or their sum, entries below the diagonal finite and >= 0.
func validateAttention(m Member, cfg Config) error {
	id := m.TrajectoryID
	k := len(m.Turns)
	if k >= 2 && len(m.Attention) == 0 {
		return fmt.Errorf("credit: trajectory %q: attnsr needs step graphs for its %d steps, got none; run the attention scorer first", id, k)
	}
	for i, lg := range m.Attention {
		mats := []struct {
			name string
			mat  [][]float64
		}{{"aa", lg.AA}, {"ao", lg.AO}}
		if lg.Sum != nil {
			if lg.AA != nil || lg.AO != nil {
				return fmt.Errorf("credit: trajectory %q attention[%d] (layer %d): sum together with aa or ao; a graph holds either the pair or their sum", id, i, lg.Layer)
			}
			mats = mats[:1]
			mats[0].name, mats[0].mat = "sum", lg.Sum
		}
		for _, nm := range mats {
			name, mat := nm.name, nm.mat
			if len(mat) != k {
				return fmt.Errorf("credit: trajectory %q attention[%d] (layer %d): %s has %d rows, want K = %d (one per turn)", id, i, lg.Layer, name, len(mat), k)
			}
			for j, row := range mat {
				if len(row) != k && len(row) != j {
					return fmt.Errorf("credit: trajectory %q attention[%d] (layer %d): %s row %d has %d entries, want K = %d (or the %d left of the diagonal)", id, i, lg.Layer, name, j, len(row), k, j)
				}
				for c := 0; c < j; c++ {
					if v := row[c]; !(v >= 0 && v <= math.MaxFloat64) { // NaN, ±Inf and negatives fail; one test per entry
						return fmt.Errorf("credit: trajectory %q attention[%d] (layer %d): %s[%d][%d] = %v is not a finite attention mass >= 0", id, i, lg.Layer, name, j, c, v)
					}
				}
			}
		}
	}
	return nil
}

// MemberReward is R_i (docs/method.md §1): the record's reward when present, else the
// best F1 of the prediction over the gold answers.
func MemberReward(m Member) float64 { return memberReward(m, nil) }

// memberReward is MemberReward with the gold answers' words kept in
// goldWords (when not nil) for the group's next member (bestF1).
func memberReward(m Member, goldWords map[string][]string) float64 {
	if m.Reward != nil {
		return *m.Reward
	}
	return bestF1(m.PredAnswer, m.GoldAnswers, goldWords)
}

// ComputeGroup finalizes one group; results are in the order of members.
// The numbers do not depend on that order, to the bit: every group-level sum
// (means, standard deviations, the EMA batch mean) runs over the members in
// the canonical order, ascending trajectory_id (byte order), so the stream
// and `creditflow compute` agree exactly whatever order members arrived in.
// partial is copied to every result. For AttnSR it performs exactly one EMA
// batch update on ema (the group is one batch, docs/method.md §3.3) and uses the
// updated R̄_t; ema must not be nil then. On error nothing is computed and
// ema is left unchanged.
func ComputeGroup(members []Member, partial bool, cfg Config, ema *EMA) ([]Result, error) {
	return computeGroup(members, partial, cfg, ema, true)
}

// ComputeValidatedGroup is ComputeGroup on members that each passed
// ValidateMember with cfg already (the advantage stage validates a member
// when it arrives, to dead-letter it alone): the same results, to the bit,
// without walking every member's graphs a second time.
func ComputeValidatedGroup(members []Member, partial bool, cfg Config, ema *EMA) ([]Result, error) {
	return computeGroup(members, partial, cfg, ema, false)
}

func computeGroup(members []Member, partial bool, cfg Config, ema *EMA, validate bool) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("credit: a group needs at least one member")
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if validate {
			if err := ValidateMember(m, cfg); err != nil {
				return nil, err
			}
		}
		if seen[m.TrajectoryID] {
			return nil, fmt.Errorf("credit: trajectory %q appears twice in one group; drop repeats before finalizing", m.TrajectoryID)
		}
		seen[m.TrajectoryID] = true
	}
	method, _ := Lookup(cfg.Method) // Validate found it
	if method.Baseline && ema == nil {
		return nil, fmt.Errorf("credit: %s needs the EMA baseline state; pass a non-nil *EMA", cfg.Method)
	}
	order := make([]int, len(members)) // order[k]: input index of the k-th member in canonical order
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return members[order[a]].TrajectoryID < members[order[b]].TrajectoryID })
	canon := make([]Member, len(members))
	for k, i := range order {
		canon[k] = members[i]
	}
	res := computeCanonical(canon, partial, cfg, method, ema)
	out := make([]Result, len(members))
	for k, i := range order {
		out[i] = res[k]
	}
	return out, nil
}

// computeCanonical is ComputeGroup on validated members in canonical order:
// §1 for every method, then the method's own group computation.
func computeCanonical(members []Member, partial bool, cfg Config, method Method, ema *EMA) []Result {
	rewards := make([]float64, len(members))
	goldWords := map[string][]string{} // the group's gold answers, normalized once
	for i, m := range members {
		rewards[i] = memberReward(m, goldWords)
	}
	aOut := OutcomeAdvantages(rewards, cfg.EpsR)

	results := make([]Result, len(members))
	for i, m := range members {
		results[i] = Result{
			TrajectoryID:     m.TrajectoryID,
			PromptID:         m.PromptID,
			Partial:          partial,
			Reward:           rewards[i],
			OutcomeAdvantage: aOut[i],
			Turns:            make([]TurnResult, len(m.Turns)),
		}
	}
	method.Group(members, results, cfg, ema)
	return results
}

// lapoGroup is docs/method.md §2.2 over the group's eligible (trajectory, turn) pairs.
func lapoGroup(members []Member, results []Result, cfg Config, _ *EMA) {
	type ref struct{ i, t int }
	var refs []ref
	var deltas []float64
	for i, m := range members {
		el := cfg.EligibleTurns(m.Turns)
		for t, turn := range m.Turns {
			if el[t] && turn.Delta != nil {
				refs = append(refs, ref{i, t})
				deltas = append(deltas, FiniteGain(*turn.Delta))
			}
		}
	}
	steps := RunLAPO(deltas, cfg)
	for i := range results {
		for t := range results[i].Turns {
			results[i].Turns[t].Advantage = results[i].OutcomeAdvantage
		}
	}
	for e, r := range refs {
		tr := &results[r.i].Turns[r.t]
		tr.Eligible = true
		tr.Delta = ptr(deltas[e])
		tr.Z = ptr(steps.Z[e])
		tr.ZNorm = ptr(steps.ZNorm[e])
		tr.Gate = steps.Gate[e]
		tr.ProcessAdvantage = steps.AProc[e]
		tr.Advantage = TokenAdvantage(results[r.i].OutcomeAdvantage, cfg.Lambda, steps.AProc[e], true)
	}
}

// attnsrGroup is docs/method.md §3.2–§3.3 with the group as one EMA batch.
func attnsrGroup(members []Member, results []Result, cfg Config, ema *EMA) {
	rewards := make([]float64, len(results))
	for i, r := range results {
		rewards[i] = r.Reward
	}
	baseline := ema.Update(Mean(rewards), cfg.Delta)
	for i, m := range members {
		k := len(m.Turns)
		alloc := Allocate(m.Attention, k, cfg)
		budget := Budget(cfg.Beta, alloc.Confidence, rewards[i], baseline)
		if budget == 0 {
			budget = 0 // no negative zero in the output
		}
		res := &results[i]
		res.AttnSR = &AttnSRResult{
			Confidence: alloc.Confidence,
			Focus:      alloc.Focus,
			Consensus:  alloc.Consensus,
			Baseline:   baseline,
			Budget:     budget,
		}
		var s []float64
		if alloc.P != nil {
			s = StepRewards(budget, alloc.P)
			for c := 0; c < k-1; c++ {
				res.Turns[c].P = ptr(alloc.P[c])
				res.Turns[c].StepReward = ptr(s[c])
			}
		}
		if cfg.Output != OutputGRPO {
			continue
		}
		p := alloc.P
		if p == nil { // K = 1 or no allocation: C = 0, every ω is 1
			p = make([]float64, k-1)
		}
		omega := StepWeights(alloc.Confidence, p)
		n := make([]int, k)
		for c, t := range m.Turns {
			n[c] = t.ActionTokens
		}
		wt := NormalizedWeights(omega, n)
		for c := range res.Turns {
			res.Turns[c].Weight = ptr(wt[c])
			res.Turns[c].Advantage = ReweightedAdvantage(res.OutcomeAdvantage, cfg.Alpha, wt[c])
		}
	}
}

func ptr(v float64) *float64 { return &v }

// TokenLength is prompt_tokens + Σ (action_tokens + observation_tokens).
func TokenLength(m Member) int {
	n := m.PromptTokens
	for _, t := range m.Turns {
		n += t.ActionTokens + t.ObservationTokens
	}
	return n
}

// TokenArrays lays out the per-token arrays of one member over
// prompt_tokens + Σ (action_tokens + observation_tokens) positions: the
// prompt, then each turn's assistant tokens and environment tokens.
//   - mask is 1 on assistant (policy) tokens, 0 elsewhere.
//   - adv (LAPO, AttnSR grpo) holds the turn's Advantage on its assistant
//     tokens and 0 elsewhere; nil for AttnSR ppo.
//   - tokenRewards (AttnSR ppo only, else nil): R_i at the last assistant
//     token of the final step plus s_k at the last assistant token of step k.
//     A step with no assistant tokens places its reward on the last
//     assistant token before it, or, when there is none, on the first
//     assistant token after it; a trajectory without assistant tokens
//     carries no token rewards.
func TokenArrays(m Member, r Result, cfg Config) (adv []float64, mask []uint8, tokenRewards []float64) {
	return new(TokenBuffers).TokenArrays(m, r, cfg)
}

// TokenBuffers holds the arrays of TokenArrays for reuse: a caller that lays
// out many members one after the other (the advantage stage, once per
// sample) keeps one and writes no new memory per member. The arrays a call
// returns are valid until the next call on the same TokenBuffers.
type TokenBuffers struct {
	adv, tokenRewards []float64
	mask              []uint8
	first             []int
}

// TokenArrays is the package function TokenArrays, in b's arrays.
func (b *TokenBuffers) TokenArrays(m Member, r Result, cfg Config) (adv []float64, mask []uint8, tokenRewards []float64) {
	n := TokenLength(m)
	b.mask = zeroed(b.mask, n)
	mask = b.mask
	method, _ := Lookup(cfg.Method)
	ppo := method.TokenRewards != nil && method.TokenRewards(cfg)
	if !ppo {
		b.adv = zeroed(b.adv, n)
		adv = b.adv
	}
	b.first = zeroed(b.first, len(m.Turns))
	first := b.first // index of a turn's first assistant token
	pos := m.PromptTokens
	for t, turn := range m.Turns {
		first[t] = pos
		for u := 0; u < turn.ActionTokens; u++ {
			mask[pos+u] = 1
			if adv != nil && t < len(r.Turns) {
				adv[pos+u] = r.Turns[t].Advantage
			}
		}
		pos += turn.ActionTokens + turn.ObservationTokens
	}
	if !ppo {
		return adv, mask, nil
	}
	b.tokenRewards = zeroed(b.tokenRewards, n)
	tokenRewards = b.tokenRewards
	place := func(step int, v float64) {
		for j := step; j >= 0; j-- {
			if a := m.Turns[j].ActionTokens; a > 0 {
				tokenRewards[first[j]+a-1] += v
				return
			}
		}
		for j := step + 1; j < len(m.Turns); j++ {
			if m.Turns[j].ActionTokens > 0 {
				tokenRewards[first[j]] += v
				return
			}
		}
	}
	for k := 0; k < len(m.Turns)-1 && k < len(r.Turns); k++ {
		if s := r.Turns[k].StepReward; s != nil {
			place(k, *s)
		}
	}
	place(len(m.Turns)-1, r.Reward)
	return nil, mask, tokenRewards
}

// zeroed returns s resized to n elements, all zero, reusing its memory
// when it is large enough.
func zeroed[E any](s []E, n int) []E {
	if s == nil || cap(s) < n { // nil only for nil: an empty layout is an empty array
		return make([]E, n)
	}
	s = s[:n]
	clear(s)
	return s
}
