package schemas

import (
	"bytes"

	"github.com/creditflow/creditflow/schemas/internal/avrobin"
)

// appendSample appends the Avro binary body of s (sample.avsc), the same
// bytes goavro writes for sampleToNative(s), without building the generic
// map first: the advantage stage encodes one sample per trajectory, and the
// generic path costs several times as much (BenchmarkSampleEncode*,
// docs/performance-passes.md). Samples' codec uses it only when
// it agrees with goavro on a probe record (sampleBinaryAgrees), so a schema
// change this function does not know falls back to the generic path.
func appendSample(b []byte, s *Sample) []byte {
	b = avrobin.AppendString(b, s.TrajectoryID)
	b = avrobin.AppendString(b, s.PromptID)
	b = avrobin.AppendLong(b, int64(s.GroupSize))
	b = avrobin.AppendLong(b, int64(s.SampleIndex))
	b = avrobin.AppendLong(b, s.PolicyVersion)
	b = avrobin.AppendLong(b, s.CreatedAtMs)
	b = avrobin.AppendString(b, s.Method)
	b = avrobin.AppendString(b, s.Output)
	b = avrobin.AppendBool(b, s.Partial)
	b = avrobin.AppendDouble(b, s.Reward)
	b = avrobin.AppendDouble(b, s.OutcomeAdvantage)
	b = avrobin.AppendPacked(b, s.Tokens)
	b = avrobin.AppendLong(b, int64(len(s.LossMask)))
	b = append(b, s.LossMask...)
	b = avrobin.AppendOptPacked(b, s.Advantages)
	b = avrobin.AppendOptPacked(b, s.TokenRewards)
	b = avrobin.AppendOptPacked(b, s.RolloutLogprobs)
	b = avrobin.AppendOptFloat(b, s.Temperature)
	if len(s.Turns) > 0 {
		b = avrobin.AppendLong(b, int64(len(s.Turns)))
		for i := range s.Turns {
			d := &s.Turns[i]
			b = avrobin.AppendString(b, d.Kind)
			b = avrobin.AppendBool(b, d.Eligible)
			b = avrobin.AppendOptDouble(b, d.Delta)
			b = avrobin.AppendOptDouble(b, d.Z)
			b = avrobin.AppendOptDouble(b, d.ZNorm)
			b = avrobin.AppendLong(b, int64(d.Gate))
			b = avrobin.AppendDouble(b, d.ProcessAdvantage)
			b = avrobin.AppendDouble(b, d.Advantage)
			b = avrobin.AppendOptDouble(b, d.P)
			b = avrobin.AppendOptDouble(b, d.StepReward)
			b = avrobin.AppendOptDouble(b, d.Weight)
		}
	}
	b = avrobin.AppendLong(b, 0) // end of the turns array
	if a := s.AttnSR; a == nil {
		b = avrobin.AppendLong(b, 0)
	} else {
		b = avrobin.AppendLong(b, 1)
		for _, v := range []float64{a.Confidence, a.Focus, a.Consensus, a.Baseline, a.Budget} {
			b = avrobin.AppendDouble(b, v)
		}
	}
	if s.ScorerPolicyVersion == nil {
		b = avrobin.AppendLong(b, 0)
	} else {
		b = avrobin.AppendLong(avrobin.AppendLong(b, 1), *s.ScorerPolicyVersion)
	}
	return avrobin.AppendOptString(b, s.Source)
}

// sampleBinaryAgrees reports whether appendSample writes what goavro writes
// for a probe sample that sets every field, with c's schema.
func sampleBinaryAgrees(c *compiled) bool {
	if c.err != nil {
		return false
	}
	f, t := 0.25, float32(0.5)
	s := &Sample{TrajectoryID: "t-1", PromptID: "p", GroupSize: 5, SampleIndex: 1, PolicyVersion: -3, CreatedAtMs: 1 << 40,
		Method: MethodLAPO, Output: "advantages", Partial: true, Reward: 1, OutcomeAdvantage: -0.5,
		Tokens: []int32{1, -2, 300}, LossMask: []uint8{0, 1, 1}, Advantages: []float32{0, 1.5, -2},
		TokenRewards: []float32{}, RolloutLogprobs: []float32{0, -0.1, -0.2}, Temperature: &t,
		Turns: []TurnDiag{{Kind: KindSearch, Eligible: true, Delta: &f, Z: &f, ZNorm: &f, Gate: 1, ProcessAdvantage: 0.1,
			Advantage: 0.2, P: &f, StepReward: &f, Weight: &f}, {Kind: KindAnswer}},
		AttnSR: &AttnSRDiag{Confidence: 1, Focus: 2, Consensus: 3, Baseline: 4, Budget: 5}}
	spv, src := int64(-7), "hotpotqa"
	s.ScorerPolicyVersion, s.Source = &spv, &src
	want, err := c.avro.BinaryFromNative(nil, sampleToNative(s))
	if err != nil || !bytes.Equal(appendSample(nil, s), want) {
		return false
	}
	s.Turns, s.AttnSR, s.Temperature, s.Advantages, s.TokenRewards, s.RolloutLogprobs = nil, nil, nil, nil, nil, nil
	s.ScorerPolicyVersion, s.Source = nil, nil
	want, err = c.avro.BinaryFromNative(nil, sampleToNative(s))
	return err == nil && bytes.Equal(appendSample(nil, s), want)
}

// appendTrajectory appends the Avro binary body of t (trajectory.avsc), the
// bytes goavro writes for trajectoryToNative(t).
func appendTrajectory(b []byte, t *Trajectory) []byte {
	b = avrobin.AppendString(b, t.TrajectoryID)
	b = avrobin.AppendString(b, t.PromptID)
	b = avrobin.AppendLong(b, int64(t.GroupSize))
	b = avrobin.AppendLong(b, int64(t.SampleIndex))
	b = avrobin.AppendLong(b, t.PolicyVersion)
	b = avrobin.AppendLong(b, t.CreatedAtMs)
	b = avrobin.AppendPacked(b, t.Prompt)
	if len(t.Turns) > 0 {
		b = avrobin.AppendLong(b, int64(len(t.Turns)))
		for i := range t.Turns {
			tu := &t.Turns[i]
			b = avrobin.AppendString(b, tu.Kind)
			b = avrobin.AppendPacked(b, tu.Action)
			b = avrobin.AppendPacked(b, tu.Observation)
		}
	}
	b = avrobin.AppendLong(b, 0)
	b = avrobin.AppendOptDouble(b, t.Reward)
	if t.PredAnswer == nil {
		b = avrobin.AppendLong(b, 0)
	} else {
		b = avrobin.AppendString(avrobin.AppendLong(b, 1), *t.PredAnswer)
	}
	if len(t.GoldAnswers) > 0 {
		b = avrobin.AppendLong(b, int64(len(t.GoldAnswers)))
		for _, g := range t.GoldAnswers {
			b = avrobin.AppendString(b, g)
		}
	}
	b = avrobin.AppendLong(b, 0)
	b = avrobin.AppendPacked(b, t.GoldTarget)
	b = avrobin.AppendLong(b, int64(t.GoldSpan[0]))
	b = avrobin.AppendLong(b, int64(t.GoldSpan[1]))
	b = avrobin.AppendOptPacked(b, t.RolloutLogprobs)
	b = avrobin.AppendOptFloat(b, t.Temperature)
	return avrobin.AppendOptString(b, t.Source)
}

// appendScored appends the Avro binary body of s (scored.avsc), the bytes
// goavro writes for scoredToNative(s).
func appendScored(b []byte, s *Scored) []byte {
	b = appendTrajectory(b, &s.Trajectory)
	b = avrobin.AppendString(b, s.Method)
	b = avrobin.AppendString(b, s.Direction)
	if len(s.Turns) > 0 {
		b = avrobin.AppendLong(b, int64(len(s.Turns)))
		for _, ts := range s.Turns {
			b = avrobin.AppendOptDouble(b, ts.Delta)
			b = avrobin.AppendOptDouble(b, ts.With)
			b = avrobin.AppendOptDouble(b, ts.Without)
		}
	}
	b = avrobin.AppendLong(b, 0)
	if len(s.Attention) > 0 {
		b = avrobin.AppendLong(b, int64(len(s.Attention)))
		for i := range s.Attention {
			g := &s.Attention[i]
			b = avrobin.AppendLong(b, int64(g.Layer))
			b = avrobin.AppendLong(b, int64(g.K))
			b = avrobin.AppendPacked(b, g.AA)
			b = avrobin.AppendPacked(b, g.AO)
		}
	}
	b = avrobin.AppendLong(b, 0)
	b = avrobin.AppendString(b, s.ScorerModel)
	b = avrobin.AppendLong(b, s.ScorerPolicyVersion)
	b = avrobin.AppendLong(b, int64(s.Truncations))
	b = avrobin.AppendLong(b, s.ScoredAtMs)
	return appendLowerGraphs(b, s.Graphs)
}
