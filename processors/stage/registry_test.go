package stage_test

import (
	"math"
	"sync"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// turnScaled is a credit method of this test's own: the outcome advantage
// A_out (docs/method.md §1) scaled by the turn's position, turn t of K
// getting A_out·(t+1)/K. It asks the scorer for nothing.
const turnScaled = "turn-scaled-test"

var registerTurnScaled = sync.OnceFunc(func() {
	credit.Register(turnScaled, credit.Method{
		Scoring: credit.ScoreNothing,
		Group: func(members []credit.Member, results []credit.Result, _ credit.Config, _ *credit.EMA) {
			for i := range results {
				k := len(results[i].Turns)
				for t := range results[i].Turns {
					results[i].Turns[t].Advantage = results[i].OutcomeAdvantage * float64(t+1) / float64(k)
				}
			}
		},
	})
})

// A method registered by a test runs through both stages on the broker
// (the score stage asks the scorer for nothing, the advantage stage groups
// and computes with it) and through `creditflow compute`, with the
// advantages worked out by hand: rewards 3 and 1 have mean 2 and
// population std 1, so A_out = ±1/(1 + ε_R), and each trajectory's two
// turns get A_out/2 and A_out.
func TestRegisteredMethodThroughComputeAndStream(t *testing.T) {
	registerTurnScaled()
	e := newEnv(t, 1, func(cfg *stage.Config) { cfg.Credit.Method = turnScaled })
	e.runStages(t, local.New(cpumodel.Tiny()))

	rewards := map[string]float64{"ts-0": 3, "ts-1": 1}
	var trs []schemas.Trajectory
	for i, id := range []string{"ts-0", "ts-1"} {
		tr := small("ts", id, 2, i, 1_000)
		r := rewards[id]
		tr.Reward = &r
		trs = append(trs, tr)
	}
	epsR := e.cfg.Credit.EpsR
	aOut := map[string]float64{"ts-0": 1 / (1 + epsR), "ts-1": -1 / (1 + epsR)}
	want := func(id string, turn int) float64 { return aOut[id] * float64(turn+1) / 2 }

	samples := publishAndRead(t, e, trs)
	if len(samples) != 2 {
		t.Fatalf("%d samples, want 2", len(samples))
	}
	for _, s := range samples {
		if s.Method != turnScaled || len(s.Turns) != 2 {
			t.Fatalf("sample %s: method %q, %d turns; want %q, 2", s.TrajectoryID, s.Method, len(s.Turns), turnScaled)
		}
		if math.Abs(s.OutcomeAdvantage-aOut[s.TrajectoryID]) > 1e-12 {
			t.Fatalf("sample %s: A_out %v, want %v", s.TrajectoryID, s.OutcomeAdvantage, aOut[s.TrajectoryID])
		}
		for i, d := range s.Turns {
			if math.Abs(d.Advantage-want(s.TrajectoryID, i)) > 1e-12 {
				t.Fatalf("sample %s turn %d: advantage %v, want %v", s.TrajectoryID, i, d.Advantage, want(s.TrajectoryID, i))
			}
		}
		// The first assistant token (after the prompt) carries turn 0's advantage.
		p := len(trs[0].Prompt)
		if s.LossMask[p] != 1 || s.Advantages[p] != float32(want(s.TrajectoryID, 0)) {
			t.Fatalf("sample %s: token %d mask %d advantage %v, want 1 and %v", s.TrajectoryID, p, s.LossMask[p], s.Advantages[p], float32(want(s.TrajectoryID, 0)))
		}
	}

	// `creditflow compute` on the scored records the stream wrote: the
	// same advantages, to the bit.
	scored := readTopic(t, e.cfg.Brokers, e.cfg.Topics.Scored)[0]
	for _, r := range scored {
		s, err := schemas.ScoredRecords().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if s.Method != turnScaled || len(s.Graphs)+len(s.Attention) != 0 {
			t.Fatalf("scored %s: method %q with %d graphs; want %q, none", s.Trajectory.TrajectoryID, s.Method, len(s.Graphs)+len(s.Attention), turnScaled)
		}
	}
	out := compute(t, scored, e.cfg.Credit)
	for _, s := range samples {
		c, ok := out[s.TrajectoryID]
		if !ok || len(c.Turns) != 2 {
			t.Fatalf("compute has no two-turn output for %s: %+v", s.TrajectoryID, c)
		}
		for i, d := range s.Turns {
			if c.Turns[i].Advantage == nil || !near(*c.Turns[i].Advantage, d.Advantage) {
				t.Fatalf("%s turn %d: compute %v, stream %v", s.TrajectoryID, i, c.Turns[i].Advantage, d.Advantage)
			}
		}
	}
}
