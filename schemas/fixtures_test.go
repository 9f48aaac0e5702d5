package schemas

import "math/rand/v2"

func ptr[V any](v V) *V { return &v }

// sampleTrajectory is a small valid trajectory with every optional field set.
func sampleTrajectory() *Trajectory {
	return &Trajectory{
		TrajectoryID:    "traj-1",
		PromptID:        "prompt-7",
		GroupSize:       5,
		SampleIndex:     2,
		PolicyVersion:   42,
		CreatedAtMs:     1_764_500_000_000,
		Prompt:          []int32{101, 102, 103},
		Turns:           []Turn{{Kind: KindSearch, Action: []int32{1, 2}, Observation: []int32{3, 4, 5}}, {Kind: KindAnswer, Action: []int32{6}}},
		Reward:          ptr(1.0),
		PredAnswer:      ptr("paris"),
		GoldAnswers:     []string{"Paris", "paris, france"},
		GoldTarget:      []int32{7, 8, 9, 10},
		GoldSpan:        [2]int32{1, 3},
		RolloutLogprobs: []float32{-0.5, -1.25, -0.125},
		Temperature:     ptr(float32(1.0)),
		Source:          ptr("nq"),
	}
}

// bigTrajectory is a realistic trajectory with about n tokens spread over
// turns of search, observation and answer.
func bigTrajectory(n int, rng *rand.Rand) *Trajectory {
	ids := func(k int) []int32 {
		if k == 0 {
			return nil // required arrays decode empty as nil
		}
		v := make([]int32, k)
		for i := range v {
			v[i] = int32(rng.IntN(DefaultVocabSize))
		}
		return v
	}
	t := &Trajectory{
		TrajectoryID: "traj-big", PromptID: "prompt-big", GroupSize: 5, PolicyVersion: 3,
		CreatedAtMs: 1_764_500_000_000, Reward: ptr(0.5), GoldAnswers: []string{"x"},
		GoldTarget: ids(24), GoldSpan: [2]int32{17, 20}, Temperature: ptr(float32(0.7)),
	}
	prompt := n / 16
	t.Prompt = ids(prompt)
	left := n - prompt
	turns := 8
	per := left / turns
	policy := 0
	for i := 0; i < turns; i++ {
		act := per / 4
		obs := per - act
		kind := KindSearch
		if i == turns-1 {
			kind, act, obs = KindAnswer, per, 0
		}
		t.Turns = append(t.Turns, Turn{Kind: kind, Action: ids(act), Observation: ids(obs)})
		policy += act
	}
	t.RolloutLogprobs = make([]float32, policy)
	for i := range t.RolloutLogprobs {
		t.RolloutLogprobs[i] = -rng.Float32() * 3
	}
	return t
}

func sampleScored() *Scored {
	return &Scored{
		Trajectory: *sampleTrajectory(),
		Method:     MethodLAPO,
		Direction:  DirectionBackward,
		Turns:      []TurnScore{{Delta: ptr(0.25), With: ptr(-1.0), Without: ptr(-1.25)}, {}},
		Attention: []LayerGraph{{Layer: 8, K: 2, AA: []float64{0, 0, 0.5, 0}, AO: []float64{0, 0, 0.25, 0}},
			{Layer: 10, K: 2, AA: []float64{0, 0, 0.125, 0}, AO: []float64{0, 0, 0.0625, 0}}},
		ScorerModel:         "tiny-llama",
		ScorerPolicyVersion: 41,
		Truncations:         1,
		ScoredAtMs:          1_764_500_001_000,
	}
}

func sampleSample() *Sample {
	return &Sample{
		TrajectoryID: "traj-1", PromptID: "prompt-7", GroupSize: 5, SampleIndex: 2, PolicyVersion: 42,
		CreatedAtMs: 1_764_500_000_000, Method: MethodAttnSR, Output: "advantages", Partial: true,
		Reward: 1, OutcomeAdvantage: 0.75,
		Tokens:          []int32{101, 102, 1, 2, 3, 6},
		LossMask:        []uint8{0, 0, 1, 1, 0, 1},
		Advantages:      []float32{0, 0, 0.5, 0.5, 0, 0.75},
		TokenRewards:    nil,
		RolloutLogprobs: []float32{0, 0, -0.5, -1, 0, -0.25},
		Temperature:     ptr(float32(0.5)),
		Turns: []TurnDiag{
			{Kind: KindSearch, Eligible: true, Delta: ptr(0.1), Z: ptr(0.2), ZNorm: ptr(0.3), Gate: 1, ProcessAdvantage: 0.3, Advantage: 0.9, P: ptr(1.0), StepReward: ptr(0.05), Weight: ptr(1.1)},
			{Kind: KindAnswer, Advantage: 0.75},
		},
		AttnSR:              &AttnSRDiag{Confidence: 0.5, Focus: 0.8, Consensus: 0.625, Baseline: 0.4, Budget: 0.075},
		ScorerPolicyVersion: ptr(int64(41)),
		Source:              ptr("nq"),
	}
}

func sampleDeadLetter() *DeadLetter {
	return &DeadLetter{Reason: ReasonBadSpan, Detail: "gold span [3, 2)", Stage: "score", Topic: "trajectories",
		Partition: 3, Offset: 12345, Key: []byte("prompt-7"), Value: []byte{0xc3, 0x01, 0, 1, 2}, AtMs: 1_764_500_002_000}
}
