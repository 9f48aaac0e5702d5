package stage

import (
	"fmt"

	"github.com/creditflow/creditflow/gpu"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// Directions of LAPO scoring (docs/method.md §2.1).
const (
	Backward = "backward"
	Forward  = "forward"
)

// lapoPlan is the rows one trajectory needs and how they combine into Δ_t.
type lapoPlan struct {
	rows []gpu.Row
	// for each turn: indexes into rows of the "with" and "without" score, or -1
	with, without []int
}

// creditTurns describes a trajectory's turns to the math package.
func creditTurns(t *schemas.Trajectory) []credit.Turn {
	out := make([]credit.Turn, len(t.Turns))
	for i, tu := range t.Turns {
		out[i] = credit.Turn{Kind: tu.Kind, ActionTokens: len(tu.Action), ObservationTokens: len(tu.Observation)}
	}
	return out
}

// planLAPO builds the scoring rows of docs/method.md §2.1 for one trajectory.
// Backward: c_full and c_−t for every eligible t (T+1 rows).
// Forward: c_≤t and c_<t for every eligible t (2T rows).
// A trajectory without a usable gold target (no gold answers, an empty first
// gold answer, or no target tokens) gets no rows and hence no process scores.
func planLAPO(t *schemas.Trajectory, direction string, cc credit.Config, placeholder []int32) (lapoPlan, error) {
	k := len(t.Turns)
	p := lapoPlan{with: make([]int, k), without: make([]int, k)}
	for i := range p.with {
		p.with[i], p.without[i] = -1, -1
	}
	if len(t.GoldAnswers) == 0 || t.GoldAnswers[0] == "" || len(t.GoldTarget) == 0 {
		return p, nil
	}
	turns := creditTurns(t)
	eligible := cc.EligibleTurns(turns)
	answer := credit.AnswerTurn(turns)
	span := [2]int{int(t.GoldSpan[0]), int(t.GoldSpan[1])}
	any := false
	for _, e := range eligible {
		any = any || e
	}
	if !any {
		return p, nil
	}
	// context builds prompt + turns[0:upto) without the answer turn, with turn
	// `drop` replaced by the placeholder (drop < 0: none).
	context := func(upto, drop int) []int32 {
		n := len(t.Prompt)
		for i := 0; i < upto; i++ {
			n += len(t.Turns[i].Action) + len(t.Turns[i].Observation)
		}
		c := make([]int32, 0, n)
		c = append(c, t.Prompt...)
		for i := 0; i < upto; i++ {
			if i == answer {
				continue
			}
			if i == drop {
				c = append(c, placeholder...)
				continue
			}
			c = append(c, t.Turns[i].Action...)
			c = append(c, t.Turns[i].Observation...)
		}
		return c
	}
	add := func(c []int32) int {
		p.rows = append(p.rows, gpu.Row{Context: c, Target: t.GoldTarget, Span: span})
		return len(p.rows) - 1
	}
	switch direction {
	case Backward, "":
		full := add(context(k, -1))
		for i, e := range eligible {
			if e {
				p.with[i], p.without[i] = full, add(context(k, i))
			}
		}
	case Forward:
		for i, e := range eligible {
			if e {
				p.with[i], p.without[i] = add(context(i+1, -1)), add(context(i, -1))
			}
		}
	default:
		return p, fmt.Errorf("unknown LAPO direction %q (want backward or forward)", direction)
	}
	return p, nil
}

// turnScores turns row scores into per-turn Δ (a non-finite Δ becomes 0, docs/method.md §2.1).
func (p lapoPlan) turnScores(scores []float64) []schemas.TurnScore {
	out := make([]schemas.TurnScore, len(p.with))
	for i := range p.with {
		if p.with[i] < 0 {
			continue
		}
		w, wo := scores[p.with[i]], scores[p.without[i]]
		d := w - wo
		if !finite(d) {
			d = 0
		}
		out[i] = schemas.TurnScore{Delta: &d, With: ptr(w), Without: ptr(wo)}
	}
	return out
}

// attentionJob lays a trajectory out for AttnSR step graphs (docs/method.md §3.1): the
// whole trajectory, every turn a step.
func attentionJob(t *schemas.Trajectory, layers []int) gpu.AttentionJob {
	n := len(t.Prompt)
	for _, tu := range t.Turns {
		n += len(tu.Action) + len(tu.Observation)
	}
	tokens := make([]int32, 0, n)
	tokens = append(tokens, t.Prompt...)
	steps := make([]gpu.Step, len(t.Turns))
	for i, tu := range t.Turns {
		a := len(tokens)
		tokens = append(tokens, tu.Action...)
		o := len(tokens)
		tokens = append(tokens, tu.Observation...)
		steps[i] = gpu.Step{Action: [2]int{a, o}, Observation: [2]int{o, len(tokens)}}
	}
	return gpu.AttentionJob{ID: t.TrajectoryID, Tokens: tokens, Steps: steps, Layers: layers}
}

func ptr(x float64) *float64 { return &x }
