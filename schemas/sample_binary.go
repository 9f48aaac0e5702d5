package schemas

import (
	"bytes"
	"encoding/binary"
	"math"
)

// appendSample appends the Avro binary body of s (sample.avsc), the same
// bytes goavro writes for sampleToNative(s), without building the generic
// map first: the advantage stage encodes one sample per trajectory and the
// generic path was a quarter of its CPU. Samples' codec uses it only when
// it agrees with goavro on a probe record (sampleBinaryAgrees), so a schema
// change this function does not know falls back to the generic path.
func appendSample(b []byte, s *Sample) []byte {
	b = appendString(b, s.TrajectoryID)
	b = appendString(b, s.PromptID)
	b = appendLong(b, int64(s.GroupSize))
	b = appendLong(b, int64(s.SampleIndex))
	b = appendLong(b, s.PolicyVersion)
	b = appendLong(b, s.CreatedAtMs)
	b = appendString(b, s.Method)
	b = appendString(b, s.Output)
	b = appendBool(b, s.Partial)
	b = appendDouble(b, s.Reward)
	b = appendDouble(b, s.OutcomeAdvantage)
	b = appendPacked(b, s.Tokens)
	b = appendLong(b, int64(len(s.LossMask)))
	b = append(b, s.LossMask...)
	b = appendOptPacked(b, s.Advantages)
	b = appendOptPacked(b, s.TokenRewards)
	b = appendOptPacked(b, s.RolloutLogprobs)
	if s.Temperature == nil {
		b = appendLong(b, 0)
	} else {
		b = appendLong(b, 1)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(*s.Temperature))
	}
	if len(s.Turns) > 0 {
		b = appendLong(b, int64(len(s.Turns)))
		for i := range s.Turns {
			d := &s.Turns[i]
			b = appendString(b, d.Kind)
			b = appendBool(b, d.Eligible)
			b = appendOptDouble(b, d.Delta)
			b = appendOptDouble(b, d.Z)
			b = appendOptDouble(b, d.ZNorm)
			b = appendLong(b, int64(d.Gate))
			b = appendDouble(b, d.ProcessAdvantage)
			b = appendDouble(b, d.Advantage)
			b = appendOptDouble(b, d.P)
			b = appendOptDouble(b, d.StepReward)
			b = appendOptDouble(b, d.Weight)
		}
	}
	b = appendLong(b, 0) // end of the turns array
	if a := s.AttnSR; a == nil {
		b = appendLong(b, 0)
	} else {
		b = appendLong(b, 1)
		for _, v := range []float64{a.Confidence, a.Focus, a.Consensus, a.Baseline, a.Budget} {
			b = appendDouble(b, v)
		}
	}
	if s.ScorerPolicyVersion == nil {
		b = appendLong(b, 0)
	} else {
		b = appendLong(appendLong(b, 1), *s.ScorerPolicyVersion)
	}
	return appendOptString(b, s.Source)
}

func appendOptString(b []byte, v *string) []byte {
	if v == nil {
		return appendLong(b, 0)
	}
	return appendString(appendLong(b, 1), *v)
}

func appendLong(b []byte, v int64) []byte { return binary.AppendVarint(b, v) } // zig-zag varint

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendDouble(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendString(b []byte, s string) []byte {
	b = appendLong(b, int64(len(s)))
	return append(b, s...)
}

func appendOptDouble(b []byte, v *float64) []byte {
	if v == nil {
		return appendLong(b, 0)
	}
	return appendDouble(appendLong(b, 1), *v)
}

// appendPacked appends v as Avro bytes of packed little-endian elements (pack).
func appendPacked[E int32 | float32](b []byte, v []E) []byte {
	n := len(v) * 4
	b = appendLong(b, int64(n))
	if hostLittleEndian {
		return append(b, asBytes(v)...)
	}
	return append(b, pack(v)...)
}

func appendOptPacked(b []byte, v []float32) []byte {
	if v == nil {
		return appendLong(b, 0)
	}
	return appendPacked(appendLong(b, 1), v)
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
	b = appendString(b, t.TrajectoryID)
	b = appendString(b, t.PromptID)
	b = appendLong(b, int64(t.GroupSize))
	b = appendLong(b, int64(t.SampleIndex))
	b = appendLong(b, t.PolicyVersion)
	b = appendLong(b, t.CreatedAtMs)
	b = appendPacked(b, t.Prompt)
	if len(t.Turns) > 0 {
		b = appendLong(b, int64(len(t.Turns)))
		for i := range t.Turns {
			tu := &t.Turns[i]
			b = appendString(b, tu.Kind)
			b = appendPacked(b, tu.Action)
			b = appendPacked(b, tu.Observation)
		}
	}
	b = appendLong(b, 0)
	b = appendOptDouble(b, t.Reward)
	if t.PredAnswer == nil {
		b = appendLong(b, 0)
	} else {
		b = appendString(appendLong(b, 1), *t.PredAnswer)
	}
	if len(t.GoldAnswers) > 0 {
		b = appendLong(b, int64(len(t.GoldAnswers)))
		for _, g := range t.GoldAnswers {
			b = appendString(b, g)
		}
	}
	b = appendLong(b, 0)
	b = appendPacked(b, t.GoldTarget)
	b = appendLong(b, int64(t.GoldSpan[0]))
	b = appendLong(b, int64(t.GoldSpan[1]))
	b = appendOptPacked(b, t.RolloutLogprobs)
	if t.Temperature == nil {
		b = appendLong(b, 0)
	} else {
		b = binary.LittleEndian.AppendUint32(appendLong(b, 1), math.Float32bits(*t.Temperature))
	}
	return appendOptString(b, t.Source)
}

// appendScored appends the Avro binary body of s (scored.avsc), the bytes
// goavro writes for scoredToNative(s).
func appendScored(b []byte, s *Scored) []byte {
	b = appendTrajectory(b, &s.Trajectory)
	b = appendString(b, s.Method)
	b = appendString(b, s.Direction)
	if len(s.Turns) > 0 {
		b = appendLong(b, int64(len(s.Turns)))
		for _, ts := range s.Turns {
			b = appendOptDouble(b, ts.Delta)
			b = appendOptDouble(b, ts.With)
			b = appendOptDouble(b, ts.Without)
		}
	}
	b = appendLong(b, 0)
	if len(s.Attention) > 0 {
		b = appendLong(b, int64(len(s.Attention)))
		for i := range s.Attention {
			g := &s.Attention[i]
			b = appendLong(b, int64(g.Layer))
			b = appendLong(b, int64(g.K))
			b = appendPacked64(b, g.AA)
			b = appendPacked64(b, g.AO)
		}
	}
	b = appendLong(b, 0)
	b = appendString(b, s.ScorerModel)
	b = appendLong(b, s.ScorerPolicyVersion)
	b = appendLong(b, int64(s.Truncations))
	b = appendLong(b, s.ScoredAtMs)
	return appendLowerGraphs(b, s.Graphs)
}

func appendPacked64(b []byte, v []float64) []byte {
	b = appendLong(b, int64(8*len(v)))
	if hostLittleEndian {
		return append(b, asBytes(v)...)
	}
	return append(b, pack(v)...)
}
