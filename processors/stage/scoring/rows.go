// Package scoring is what the score stage asks a scorer for one trajectory,
// and what it makes of the answer: the LAPO rows of docs/method.md §2.1 in
// the protocol's compact form (PlanLAPO), the AttnSR step-graph job of
// §3.1 (AttentionJob), and back from the scores and graphs the scored
// record's turn scores (Plan.TurnScores) and lowered graphs (LowerGraphs).
//
// Guarantees: the rows are exactly those the score stage sends, and
// LAPORows and Gains give them (and their Δ) to the built-in model's
// training data and the demo's offline measurements, so everything scores
// the same rows; a row the scorer could not score yields a zero Δ and a
// null score, never a non-finite value in a record; a trajectory without a
// usable gold target gets no rows.
package scoring

import (
	"fmt"
	"math"
	"strconv"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
)

// Directions of LAPO scoring (docs/method.md §2.1).
const (
	Backward = vocab.Backward
	Forward  = vocab.Forward
)

// Plan is the rows one trajectory needs and how they combine into Δ_t.
type Plan struct {
	// rows carry no Context: row j's context is pieces[j], spans into
	// tokens (the trajectory without its answer turn, once) and the
	// placeholder (the compact rows of docs/scorer-protocol.md).
	rows   []scorer.Row
	tokens []int32
	pieces [][]scorer.Piece
	// noGoldTarget: the trajectory has no usable gold target (no rows)
	noGoldTarget bool
	// for each turn: indexes into rows of the "with" and "without" score, or -1
	// (kl: both the turn's one row)
	with, without []int
	// stat is the statistic the rows are scored with (credit.StatLogProb,
	// StatEntropy or StatKL); kl rows carry the "without" context as their
	// ReferenceContext.
	stat vocab.Statistic
}

// CreditTurns describes a trajectory's turns to the math package.
func CreditTurns(t *schemas.Trajectory) []credit.Turn {
	out := make([]credit.Turn, len(t.Turns))
	for i, tu := range t.Turns {
		out[i] = credit.Turn{Kind: tu.Kind, ActionTokens: len(tu.Action), ObservationTokens: len(tu.Observation)}
	}
	return out
}

// PlanLAPO builds the scoring rows of docs/method.md §2.1 for one trajectory.
// Backward: c_full and c_−t for every eligible t (T+1 rows).
// Forward: c_≤t and c_<t for every eligible t (2T rows).
// A trajectory without a usable gold target gets no rows and hence no process
// scores (see hasGoldTarget); its plan says so in noGoldTarget.
func PlanLAPO(t *schemas.Trajectory, direction vocab.Direction, cc credit.Config, placeholder []int32) (Plan, error) {
	return PlanLAPOStatistic(t, direction, credit.StatLogProb, cc, placeholder)
}

// PlanLAPOStatistic is PlanLAPO for the statistic stat (docs/method.md
// §2.4; "" is logprob). Entropy scores the same rows as logprob. KL has one
// row per eligible turn: the "with" context (c_full or c_≤t) as its
// pieces and the "without" context (c_−t or c_<t) as its reference.
func PlanLAPOStatistic(t *schemas.Trajectory, direction vocab.Direction, stat vocab.Statistic, cc credit.Config, placeholder []int32) (Plan, error) {
	if stat == "" {
		stat = credit.StatLogProb
	}
	if err := credit.CheckStatistic(stat); err != nil {
		return Plan{}, err
	}
	k := len(t.Turns)
	p := Plan{with: make([]int, k), without: make([]int, k), stat: stat}
	for i := range p.with {
		p.with[i], p.without[i] = -1, -1
	}
	if !hasGoldTarget(t) {
		p.noGoldTarget = true
		return p, nil
	}
	turns := CreditTurns(t)
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
	// tokens: prompt + every turn but the answer turn, once; start[i] and
	// end[i] bound turn i in it (the answer turn is empty there).
	n := len(t.Prompt)
	for _, tu := range t.Turns {
		n += len(tu.Action) + len(tu.Observation)
	}
	p.tokens = make([]int32, 0, n)
	p.tokens = append(p.tokens, t.Prompt...)
	start, end := make([]int, k), make([]int, k)
	for i, tu := range t.Turns {
		start[i] = len(p.tokens)
		if i != answer {
			p.tokens = append(p.tokens, tu.Action...)
			p.tokens = append(p.tokens, tu.Observation...)
		}
		end[i] = len(p.tokens)
	}
	// context is prompt + turns[0:upto) without the answer turn, with turn
	// `drop` replaced by the placeholder (drop < 0: none), as pieces.
	context := func(upto, drop int) []scorer.Piece {
		cut := len(t.Prompt)
		if upto > 0 {
			cut = end[upto-1]
		}
		ps := make([]scorer.Piece, 0, 3)
		if drop < 0 {
			if cut > 0 {
				ps = append(ps, scorer.Piece{Start: 0, End: cut})
			}
			return ps
		}
		if start[drop] > 0 {
			ps = append(ps, scorer.Piece{Start: 0, End: start[drop]})
		}
		ps = append(ps, scorer.Piece{Literal: scorer.Tokens(placeholder)})
		if cut > end[drop] {
			ps = append(ps, scorer.Piece{Start: end[drop], End: cut})
		}
		return ps
	}
	temp := rolloutTemperature(t)
	add := func(c []scorer.Piece) int {
		p.rows = append(p.rows, scorer.Row{Target: t.GoldTarget, Span: span, Temperature: temp})
		p.pieces = append(p.pieces, c)
		return len(p.rows) - 1
	}
	if stat == credit.StatKL {
		// One row per turn: KL(p(·|with) ‖ p(·|without)), the without
		// context in full as the reference.
		pair := func(i int, with, without []scorer.Piece) {
			r := add(with)
			var ref []int32
			for _, pc := range without {
				if pc.Literal != nil {
					ref = append(ref, pc.Literal...)
				} else {
					ref = append(ref, p.tokens[pc.Start:pc.End]...)
				}
			}
			p.rows[r].ReferenceContext = ref
			p.with[i], p.without[i] = r, r
		}
		switch direction {
		case Backward, "":
			for i, e := range eligible {
				if e {
					pair(i, context(k, -1), context(k, i))
				}
			}
		case Forward:
			for i, e := range eligible {
				if e {
					pair(i, context(i+1, -1), context(i, -1))
				}
			}
		default:
			return p, fmt.Errorf("unknown LAPO direction %q (want backward or forward)", direction)
		}
		return p, nil
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

// RowSet is the plan's rows as one compact set labelled id, asking for the
// plan's statistic (none named for logprob: the request of every scorer).
func (p Plan) RowSet(id string) scorer.RowSet {
	s := scorer.RowSet{ID: id, Rows: p.rows, Tokens: p.tokens, Pieces: p.pieces}
	if p.stat != "" && p.stat != credit.StatLogProb {
		s.Statistic = string(p.stat)
	}
	return s
}

// Empty reports whether the plan has no rows: nothing to score.
func (p Plan) Empty() bool { return len(p.rows) == 0 }

// NoGoldTarget reports whether the trajectory had no usable gold target
// (and so no rows).
func (p Plan) NoGoldTarget() bool { return p.noGoldTarget }

// expandedRows is the plan's rows with their contexts materialized.
func (p Plan) expandedRows() ([]scorer.Row, error) {
	s, err := scorer.ExpandSet(p.RowSet(""))
	return s.Rows, err
}

// rolloutTemperature is the temperature the rows are scored at: the record's
// sampling temperature (the reference divides the logits by it), or 0 (the
// scorer's default, 1) when the record has none. The float32 field is read as
// the shortest decimal that gives it back (float32 0.7 → 0.7, not
// 0.699999988…), the value the rollout worker set.
func rolloutTemperature(t *schemas.Trajectory) float64 {
	if t.Temperature == nil {
		return 0
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(float64(*t.Temperature), 'g', -1, 32), 64)
	if err != nil {
		return float64(*t.Temperature)
	}
	return v
}

// hasGoldTarget reports whether t carries a usable LAPO gold target: target
// tokens with their span (ValidateTrajectory has checked that the span is a
// non-empty range inside the target), built from a first gold answer that is
// not empty or only whitespace (credit.Blank). Gold answers are not required:
// a record with a reward and a gold target is scored.
func hasGoldTarget(t *schemas.Trajectory) bool {
	if len(t.GoldTarget) == 0 || t.GoldSpan[0] >= t.GoldSpan[1] {
		return false
	}
	return len(t.GoldAnswers) == 0 || !credit.Blank(t.GoldAnswers[0])
}

// TurnScores turns row scores into per-turn Δ (credit.Gain of the plan's
// statistic: with − without for logprob, without − with for entropy, the
// turn's KL for kl). A non-finite Δ (a row the scorer could not score comes
// back non-finite) becomes 0; a non-finite with or without score is carried
// as nil (null), so the scored record stays valid. A kl turn carries its KL
// as With and no Without. nonFinite counts the turns whose Δ became 0 that
// way.
func (p Plan) TurnScores(scores []float64) (out []schemas.TurnScore, nonFinite int) {
	out = make([]schemas.TurnScore, len(p.with))
	for i := range p.with {
		if p.with[i] < 0 {
			continue
		}
		w, wo := scores[p.with[i]], scores[p.without[i]]
		d := credit.Gain(p.stat, w, wo)
		if !finite(d) {
			d = 0
			nonFinite++
		}
		ts := schemas.TurnScore{Delta: &d}
		if finite(w) {
			ts.With = ptr(w)
		}
		if finite(wo) && p.stat != credit.StatKL {
			ts.Without = ptr(wo)
		}
		out[i] = ts
	}
	return out, nonFinite
}

// AttentionJob lays a trajectory out for AttnSR step graphs (docs/method.md §3.1): the
// whole trajectory, every turn a step.
func AttentionJob(t *schemas.Trajectory, layers []int) scorer.AttentionJob {
	n := len(t.Prompt)
	for _, tu := range t.Turns {
		n += len(tu.Action) + len(tu.Observation)
	}
	tokens := make([]int32, 0, n)
	tokens = append(tokens, t.Prompt...)
	steps := make([]scorer.Step, len(t.Turns))
	for i, tu := range t.Turns {
		a := len(tokens)
		tokens = append(tokens, tu.Action...)
		o := len(tokens)
		tokens = append(tokens, tu.Observation...)
		steps[i] = scorer.Step{Action: [2]int{a, o}, Observation: [2]int{o, len(tokens)}}
	}
	return scorer.AttentionJob{ID: t.TrajectoryID, Tokens: tokens, Steps: steps, Layers: layers}
}

// LowerGraphs are the scorer's K×K step graphs in the scored record's
// compact form (docs/wire-format.md, "Scored"): scorer.CutGraphs, the rule a
// scorer asked for lower graphs applies itself (scorer.AttentionOptions).
func LowerGraphs(gs []scorer.StepGraph) []schemas.LowerGraph { return scorer.CutGraphs(gs) }

func ptr(x float64) *float64 { return &x }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
