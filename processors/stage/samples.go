package stage

import (
	"math"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// member describes a scored trajectory to the math package.
func member(s *schemas.Scored) credit.Member {
	t := &s.Trajectory
	m := credit.Member{
		TrajectoryID: t.TrajectoryID,
		PromptID:     t.PromptID,
		GroupSize:    int(t.GroupSize),
		Reward:       t.Reward,
		PredAnswer:   t.PredAnswer,
		GoldAnswers:  t.GoldAnswers,
		PromptTokens: len(t.Prompt),
		Turns:        creditTurns(t),
	}
	for i := range m.Turns {
		if i < len(s.Turns) {
			m.Turns[i].Delta = s.Turns[i].Delta
		}
	}
	for _, g := range s.Attention {
		k := int(g.K)
		lg := credit.LayerGraph{Layer: int(g.Layer), AA: make([][]float64, k), AO: make([][]float64, k)}
		for j := 0; j < k; j++ {
			lg.AA[j] = g.AA[j*k : (j+1)*k]
			lg.AO[j] = g.AO[j*k : (j+1)*k]
		}
		m.Attention = append(m.Attention, lg)
	}
	return m
}

// sample builds the training sample of one member from its group result.
func sample(s *schemas.Scored, m credit.Member, r credit.Result, cfg credit.Config) schemas.Sample {
	t := &s.Trajectory
	adv, mask, rewards := credit.TokenArrays(m, r, cfg)
	out := schemas.Sample{
		TrajectoryID:     t.TrajectoryID,
		PromptID:         t.PromptID,
		GroupSize:        t.GroupSize,
		SampleIndex:      t.SampleIndex,
		PolicyVersion:    t.PolicyVersion,
		CreatedAtMs:      t.CreatedAtMs,
		Method:           cfg.Method,
		Output:           "advantages",
		Partial:          r.Partial,
		Reward:           r.Reward,
		OutcomeAdvantage: r.OutcomeAdvantage,
		Tokens:           make([]int32, 0, len(mask)),
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
	if adv != nil { // nil for AttnSR ppo: the trainer's critic computes advantages
		out.Advantages = make([]float32, len(adv))
		for i, a := range adv {
			out.Advantages[i] = float32(a)
		}
	}
	if rewards != nil {
		out.Output = "token_rewards"
		out.TokenRewards = make([]float32, len(rewards))
		for i, x := range rewards {
			out.TokenRewards[i] = float32(x)
		}
	}
	if t.RolloutLogprobs != nil {
		out.RolloutLogprobs = make([]float32, len(out.Tokens))
		j := 0
		for i, mk := range mask {
			if mk == 1 && j < len(t.RolloutLogprobs) {
				out.RolloutLogprobs[i] = t.RolloutLogprobs[j]
				j++
			}
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
