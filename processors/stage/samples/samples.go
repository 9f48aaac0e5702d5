// Package samples turns the advantage stage's records into the group
// computation's members and its results into training samples: Member
// reads a scored record as a credit.Member, Build lays a member's result
// out as the schemas.Sample a trainer reads (docs/wire-format.md), and
// ComputeInput writes a scored record as a line of `creditflow compute`
// (docs/offline.md).
//
// Guarantees: pure and deterministic (the same record and result give the
// same sample, bit for bit); a sample built in a Scratch equals one built
// afresh; a record's token arrays are read, never written.
package samples

import (
	"bytes"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
)

// Member describes a scored trajectory to the math package.
func Member(s *schemas.Scored) credit.Member {
	t := &s.Trajectory
	m := credit.Member{
		TrajectoryID: t.TrajectoryID,
		PromptID:     t.PromptID,
		GroupSize:    int(t.GroupSize),
		Reward:       t.Reward,
		PredAnswer:   t.PredAnswer,
		GoldAnswers:  t.GoldAnswers,
		PromptTokens: len(t.Prompt),
		Turns:        scoring.CreditTurns(t),
	}
	for i := range m.Turns {
		if i < len(s.Turns) {
			m.Turns[i].Delta = s.Turns[i].Delta
		}
	}
	// The graphs below their diagonals (what AttnSR reads), whichever
	// generation wrote the record, as pairs or in the sum form: row j of a
	// layer is a view of its j entries left of the diagonal.
	graphs := s.StepGraphs()
	if len(graphs) > 0 {
		m.Attention = make([]credit.LayerGraph, 0, len(graphs))
	}
	for _, g := range graphs {
		k := int(g.K)
		if g.Summed() {
			if k < 0 || len(g.Sum) != schemas.LowerLen(k) || len(g.AA)+len(g.AO) > 0 {
				m.Attention = append(m.Attention, credit.LayerGraph{Layer: int(g.Layer)}) // ValidateMember refuses it
				continue
			}
			lg := credit.LayerGraph{Layer: int(g.Layer), Sum: make([][]float64, k)}
			for j := 0; j < k; j++ {
				o := schemas.LowerIndex(j, 0)
				lg.Sum[j] = g.Sum[o : o+j : o+j]
			}
			m.Attention = append(m.Attention, lg)
			continue
		}
		if k < 0 || len(g.AA) != schemas.LowerLen(k) || len(g.AO) != schemas.LowerLen(k) {
			m.Attention = append(m.Attention, credit.LayerGraph{Layer: int(g.Layer)}) // ValidateMember refuses it
			continue
		}
		rows := make([][]float64, 2*k)
		lg := credit.LayerGraph{Layer: int(g.Layer), AA: rows[:k:k], AO: rows[k:]}
		for j := 0; j < k; j++ {
			o := schemas.LowerIndex(j, 0)
			lg.AA[j] = g.AA[o : o+j : o+j]
			lg.AO[j] = g.AO[o : o+j : o+j]
		}
		m.Attention = append(m.Attention, lg)
	}
	return m
}

// Scratch holds the per-token arrays of one sample for reuse: the
// advantage stage builds a sample and encodes it at once, so one scratch per
// partition serves every sample it writes, and building a sample writes no
// new memory (a search-QA sample's arrays are ≈ 27 KB).
type Scratch struct {
	layout                        credit.TokenBuffers
	tokens                        []int32
	advantages, rewards, logprobs []float32
}

// Build builds the training sample of one member from its group result.
// With a scratch, the sample's arrays are the scratch's and are valid until
// its next use; with nil, they are the sample's own.
func Build(s *schemas.Scored, m credit.Member, r credit.Result, cfg credit.Config, sc *Scratch) schemas.Sample {
	if sc == nil {
		sc = new(Scratch)
	}
	t := &s.Trajectory
	adv, mask, rewards := sc.layout.TokenArrays(m, r, cfg)
	out := schemas.Sample{
		TrajectoryID:     t.TrajectoryID,
		PromptID:         t.PromptID,
		GroupSize:        t.GroupSize,
		SampleIndex:      t.SampleIndex,
		PolicyVersion:    t.PolicyVersion,
		CreatedAtMs:      t.CreatedAtMs,
		Method:           string(cfg.Method),
		Output:           "advantages",
		Partial:          r.Partial,
		Reward:           r.Reward,
		OutcomeAdvantage: r.OutcomeAdvantage,
		Tokens:           sc.tokens[:0],
		LossMask:         mask,
		Temperature:      t.Temperature,
		Source:           t.Source,
	}
	spv := s.ScorerPolicyVersion
	out.ScorerPolicyVersion = &spv
	out.Tokens = append(out.Tokens, t.Prompt...)
	for _, tu := range t.Turns {
		out.Tokens = append(out.Tokens, tu.Action...)
		out.Tokens = append(out.Tokens, tu.Observation...)
	}
	sc.tokens = out.Tokens
	if adv != nil { // nil for AttnSR ppo: the trainer's critic computes advantages
		sc.advantages = resized(sc.advantages, len(adv))
		out.Advantages = sc.advantages
		// Zero where the mask is 0 (TokenArrays writes advantages only
		// under it), converted run by run of the mask elsewhere.
		clear(out.Advantages)
		for i, e := range maskRuns(mask) {
			for k := i; k < e; k++ {
				out.Advantages[k] = float32(adv[k])
			}
		}
	}
	if rewards != nil {
		out.Output = "token_rewards"
		sc.rewards = resized(sc.rewards, len(rewards))
		out.TokenRewards = sc.rewards
		for i, x := range rewards {
			out.TokenRewards[i] = float32(x)
		}
	}
	if t.RolloutLogprobs != nil {
		sc.logprobs = resized(sc.logprobs, len(out.Tokens))
		out.RolloutLogprobs = sc.logprobs
		clear(out.RolloutLogprobs)
		// The trajectory's log-probs in order over the mask's 1s, as far
		// as they go: one copy per run of the mask.
		lp := t.RolloutLogprobs
		for i, e := range maskRuns(mask) {
			lp = lp[copy(out.RolloutLogprobs[i:e], lp):]
		}
	}
	out.Turns = make([]schemas.TurnDiag, len(r.Turns))
	for i, tr := range r.Turns {
		out.Turns[i] = schemas.TurnDiag{
			Kind:             t.Turns[i].Kind,
			Eligible:         tr.Eligible,
			Delta:            tr.Delta,
			Z:                tr.Z,
			ZNorm:            tr.ZNorm,
			Gate:             int32(tr.Gate),
			ProcessAdvantage: tr.ProcessAdvantage,
			Advantage:        tr.Advantage,
			P:                tr.P,
			StepReward:       tr.StepReward,
			Weight:           tr.Weight,
		}
	}
	if r.AttnSR != nil {
		out.AttnSR = &schemas.AttnSRDiag{
			Confidence: r.AttnSR.Confidence,
			Focus:      r.AttnSR.Focus,
			Consensus:  r.AttnSR.Consensus,
			Baseline:   r.AttnSR.Baseline,
			Budget:     r.AttnSR.Budget,
		}
	}
	return out
}

// maskRuns yields the runs of 1s of a loss mask as [start, end), in order;
// a mask holds only 0s and 1s, and the runs are found with the byte
// search's vector instructions rather than token by token.
func maskRuns(mask []uint8) func(yield func(int, int) bool) {
	return func(yield func(int, int) bool) {
		for i := 0; i < len(mask); {
			k := bytes.IndexByte(mask[i:], 1)
			if k < 0 {
				return
			}
			i += k
			e := bytes.IndexByte(mask[i:], 0)
			if e < 0 {
				e = len(mask) - i
			}
			if !yield(i, i+e) {
				return
			}
			i += e
		}
	}
}

// resized returns s with n elements, reusing its memory when it is large
// enough; the elements are left as they were (the caller writes them all).
func resized(s []float32, n int) []float32 {
	if s == nil || cap(s) < n { // an empty array stays an array (Avro: not null)
		return make([]float32, n)
	}
	return s[:n]
}
