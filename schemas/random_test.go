package schemas

import (
	"math/rand/v2"
	"testing"
)

// Random records exercise every combination of present/absent optional
// fields and empty/non-empty arrays; each must round-trip exactly.

func randIDs(rng *rand.Rand, maxLen int) []int32 {
	n := rng.IntN(maxLen + 1)
	if n == 0 {
		return nil // required arrays decode empty as nil
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(rng.Uint32())
	}
	return v
}

func randF32s(rng *rand.Rand, maxLen int) []float32 {
	switch rng.IntN(3) {
	case 0:
		return nil
	case 1:
		return []float32{}
	}
	v := make([]float32, 1+rng.IntN(maxLen))
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func maybe[V any](rng *rand.Rand, v V) *V {
	if rng.IntN(2) == 0 {
		return nil
	}
	return &v
}

func randString(rng *rand.Rand) string {
	b := make([]byte, rng.IntN(12))
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

func randTrajectory(rng *rand.Rand) *Trajectory {
	t := &Trajectory{
		TrajectoryID: randString(rng), PromptID: randString(rng),
		GroupSize: rng.Int32(), SampleIndex: -rng.Int32(), PolicyVersion: rng.Int64() - rng.Int64(),
		CreatedAtMs: rng.Int64(), Prompt: randIDs(rng, 20),
		Reward: maybe(rng, rng.NormFloat64()), PredAnswer: maybe(rng, randString(rng)),
		GoldTarget: randIDs(rng, 8), GoldSpan: [2]int32{rng.Int32(), -rng.Int32()},
		RolloutLogprobs: randF32s(rng, 10), Temperature: maybe(rng, rng.Float32()),
		Source: maybe(rng, randString(rng)),
	}
	for i := rng.IntN(4); i > 0; i-- {
		t.Turns = append(t.Turns, Turn{Kind: randString(rng), Action: randIDs(rng, 6), Observation: randIDs(rng, 6)})
	}
	for i := rng.IntN(3); i > 0; i-- {
		t.GoldAnswers = append(t.GoldAnswers, randString(rng))
	}
	return t
}

func TestRandomRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for it := 0; it < 300; it++ {
		tr := randTrajectory(rng)
		roundTrip(t, Trajectories(), tr)

		s := &Scored{Trajectory: *tr, Method: randString(rng), Direction: randString(rng),
			ScorerModel: randString(rng), ScorerPolicyVersion: rng.Int64(), Truncations: rng.Int32(), ScoredAtMs: rng.Int64()}
		for i := rng.IntN(4); i > 0; i-- {
			s.Turns = append(s.Turns, TurnScore{Delta: maybe(rng, rng.NormFloat64()), With: maybe(rng, rng.NormFloat64()), Without: maybe(rng, rng.NormFloat64())})
		}
		for i := rng.IntN(3); i > 0; i-- {
			k := rng.IntN(4)
			g := LayerGraph{Layer: rng.Int32(), K: int32(k)}
			if k > 0 {
				g.AA, g.AO = make([]float64, k*k), make([]float64, k*k)
				for j := range g.AA {
					g.AA[j], g.AO[j] = rng.Float64(), rng.Float64()
				}
			}
			s.Attention = append(s.Attention, g)
		}
		for i := rng.IntN(3); i > 0; i-- {
			g := LowerGraph{Layer: rng.Int32(), K: rng.Int32N(5)}
			if n := rng.IntN(7); n > 0 {
				g.AA = make([]float64, n)
				for j := range g.AA {
					g.AA[j] = rng.Float64()
				}
			}
			if n := rng.IntN(7); n > 0 {
				g.AO = make([]float64, n)
				for j := range g.AO {
					g.AO[j] = rng.Float64()
				}
			}
			s.Graphs = append(s.Graphs, g)
		}
		roundTrip(t, ScoredRecords(), s)

		sm := &Sample{TrajectoryID: randString(rng), PromptID: randString(rng), GroupSize: rng.Int32(),
			Method: randString(rng), Output: randString(rng), Partial: rng.IntN(2) == 0, Reward: rng.NormFloat64(),
			OutcomeAdvantage: rng.NormFloat64(), Tokens: randIDs(rng, 10),
			Advantages: randF32s(rng, 10), TokenRewards: randF32s(rng, 10), RolloutLogprobs: randF32s(rng, 10),
			Temperature: maybe(rng, rng.Float32()), ScorerPolicyVersion: maybe(rng, rng.Int64()-rng.Int64()),
			Source: maybe(rng, randString(rng))}
		if n := len(sm.Tokens); n > 0 {
			sm.LossMask = make([]uint8, n)
			for i := range sm.LossMask {
				sm.LossMask[i] = uint8(rng.IntN(2))
			}
		}
		for i := rng.IntN(3); i > 0; i-- {
			sm.Turns = append(sm.Turns, TurnDiag{Kind: randString(rng), Eligible: rng.IntN(2) == 0,
				Delta: maybe(rng, rng.NormFloat64()), Z: maybe(rng, rng.NormFloat64()), ZNorm: maybe(rng, rng.NormFloat64()),
				Gate: rng.Int32N(2), ProcessAdvantage: rng.NormFloat64(), Advantage: rng.NormFloat64(),
				P: maybe(rng, rng.Float64()), StepReward: maybe(rng, rng.NormFloat64()), Weight: maybe(rng, rng.Float64())})
		}
		if rng.IntN(2) == 0 {
			sm.AttnSR = &AttnSRDiag{Confidence: rng.Float64(), Focus: rng.Float64(), Consensus: rng.Float64(), Baseline: rng.NormFloat64(), Budget: rng.NormFloat64()}
		}
		roundTrip(t, Samples(), sm)

		d := &DeadLetter{Reason: randString(rng), Detail: randString(rng), Stage: randString(rng), Topic: randString(rng),
			Partition: rng.Int32(), Offset: rng.Int64(), AtMs: rng.Int64()}
		if rng.IntN(3) > 0 {
			d.Key = []byte(randString(rng))
		}
		if rng.IntN(3) > 0 {
			d.Value = []byte(randString(rng))
		}
		roundTrip(t, DeadLetters(), d)
	}
}
