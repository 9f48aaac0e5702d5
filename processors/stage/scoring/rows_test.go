package scoring

import (
	"math"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

func ids(xs ...int32) []int32 { return xs }

// A trajectory: prompt [1 2], search turn A [10 | 11 12], tool turn [20 | 21],
// search turn B [30 | 31], answer [40].
func sampleTrajectory() *schemas.Trajectory {
	return &schemas.Trajectory{
		TrajectoryID: "t", PromptID: "p", GroupSize: 1,
		Prompt: ids(1, 2),
		Turns: []schemas.Turn{
			{Kind: schemas.KindSearch, Action: ids(10), Observation: ids(11, 12)},
			{Kind: schemas.KindTool, Action: ids(20), Observation: ids(21)},
			{Kind: schemas.KindSearch, Action: ids(30), Observation: ids(31)},
			{Kind: schemas.KindAnswer, Action: ids(40)},
		},
		GoldAnswers: []string{"x"},
		GoldTarget:  ids(90, 91, 92),
		GoldSpan:    [2]int32{1, 2},
	}
}

func contexts(p Plan) [][]int32 {
	rows, err := p.expandedRows()
	if err != nil {
		panic(err)
	}
	var out [][]int32
	for _, r := range rows {
		out = append(out, r.Context)
	}
	return out
}

func TestPlanBackwardRows(t *testing.T) {
	p, err := PlanLAPO(sampleTrajectory(), Backward, credit.DefaultConfig(), ids(99))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{
		{1, 2, 10, 11, 12, 20, 21, 30, 31}, // c_full: the answer turn left out
		{1, 2, 99, 20, 21, 30, 31},         // c_−1: turn A replaced by the placeholder
		{1, 2, 10, 11, 12, 20, 21, 99},     // c_−3
	}
	if got := contexts(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("contexts\n got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(p.with, []int{0, -1, 0, -1}) || !reflect.DeepEqual(p.without, []int{1, -1, 2, -1}) {
		t.Fatalf("with %v without %v", p.with, p.without)
	}
	for _, r := range p.rows {
		if r.Span != [2]int{1, 2} || !reflect.DeepEqual(r.Target, ids(90, 91, 92)) {
			t.Fatalf("row target %v span %v", r.Target, r.Span)
		}
	}
	ts, _ := p.TurnScores([]float64{-1, -3, -0.5})
	if *ts[0].Delta != 2 || *ts[2].Delta != -0.5 || ts[1].Delta != nil || ts[3].Delta != nil {
		t.Fatalf("deltas %+v", ts)
	}
}

func TestPlanForwardRows(t *testing.T) {
	p, err := PlanLAPO(sampleTrajectory(), Forward, credit.DefaultConfig(), ids(99))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{
		{1, 2, 10, 11, 12},                 // c_≤1
		{1, 2},                             // c_<1
		{1, 2, 10, 11, 12, 20, 21, 30, 31}, // c_≤3
		{1, 2, 10, 11, 12, 20, 21},         // c_<3
	}
	if got := contexts(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("contexts\n got %v\nwant %v", got, want)
	}
}

func TestPlanNoRowsWithoutGold(t *testing.T) {
	for name, mut := range map[string]func(*schemas.Trajectory){
		"empty first gold":  func(t *schemas.Trajectory) { t.GoldAnswers = []string{"", "y"} },
		"no target tokens":  func(t *schemas.Trajectory) { t.GoldTarget = nil },
		"no eligible turns": func(t *schemas.Trajectory) { t.Turns = t.Turns[3:] },
	} {
		tr := sampleTrajectory()
		mut(tr)
		p, err := PlanLAPO(tr, Backward, credit.DefaultConfig(), ids(99))
		if err != nil || len(p.rows) != 0 {
			t.Fatalf("%s: %d rows, err %v", name, len(p.rows), err)
		}
	}
}

func TestNonFiniteDeltaBecomesZero(t *testing.T) {
	p, _ := PlanLAPO(sampleTrajectory(), Backward, credit.DefaultConfig(), ids(99))
	inf := math.Inf(1)
	ts, _ := p.TurnScores([]float64{inf, inf, 0})
	if *ts[0].Delta != 0 {
		t.Fatalf("inf - inf gave Δ %v, want 0", *ts[0].Delta)
	}
}

func TestAttentionJobLayout(t *testing.T) {
	j := AttentionJob(sampleTrajectory(), []int{0, 1})
	if !reflect.DeepEqual(j.Tokens, ids(1, 2, 10, 11, 12, 20, 21, 30, 31, 40)) {
		t.Fatalf("tokens %v", j.Tokens)
	}
	want := [][2][2]int{{{2, 3}, {3, 5}}, {{5, 6}, {6, 7}}, {{7, 8}, {8, 9}}, {{9, 10}, {10, 10}}}
	for i, s := range j.Steps {
		if s.Action != want[i][0] || s.Observation != want[i][1] {
			t.Fatalf("step %d: %v %v, want %v", i, s.Action, s.Observation, want[i])
		}
	}
}

// A row the scorer could not score comes back non-finite (null on the wire,
// NaN here). The turns that use it get Δ = 0, the missing score is carried as
// null, and the scored record stays valid instead of being dead-lettered.
func TestNonFiniteRowScoreGivesZeroGain(t *testing.T) {
	tr := sampleTrajectory()
	p, _ := PlanLAPO(tr, Backward, credit.DefaultConfig(), ids(99))
	ts, bad := p.TurnScores([]float64{math.NaN(), -3, -0.5})
	if bad != 2 {
		t.Errorf("non-finite gains counted %d, want 2 (both eligible turns use c_full)", bad)
	}
	for _, i := range []int{0, 2} {
		if ts[i].Delta == nil || *ts[i].Delta != 0 {
			t.Fatalf("turn %d: Δ = %v, want 0", i, ts[i].Delta)
		}
		if ts[i].With != nil {
			t.Errorf("turn %d: with = %v, want null (not computed)", i, *ts[i].With)
		}
	}
	if *ts[0].Without != -3 || *ts[2].Without != -0.5 {
		t.Errorf("finite without scores not kept: %v %v", *ts[0].Without, *ts[2].Without)
	}
	sc := &schemas.Scored{Trajectory: *tr, Method: schemas.MethodLAPO, Direction: schemas.DirectionBackward, Turns: ts}
	if err := schemas.ValidateScored(sc, schemas.DefaultLimits()); err != nil {
		t.Fatalf("scored record with a non-finite row score is rejected: %v", err)
	}
	// A non-finite "without" row affects only its own turn.
	ts, bad = p.TurnScores([]float64{-1, math.Inf(-1), -0.5})
	if bad != 1 || *ts[0].Delta != 0 || ts[0].Without != nil || *ts[0].With != -1 || *ts[2].Delta != -0.5 {
		t.Errorf("inf without: bad %d, turn 0 %+v, turn 2 Δ %v", bad, ts[0], *ts[2].Delta)
	}
}

// Whether a trajectory is scored is decided by its gold target and span: a
// record with a reward and a target but no gold answers is scored; a first
// gold answer that is empty or only whitespace (as Python's str.strip sees
// it) means there is no usable target.
func TestPlanGoldTargetDecides(t *testing.T) {
	r := 1.0
	for _, tc := range []struct {
		name   string
		mut    func(*schemas.Trajectory)
		scored bool
	}{
		{"gold answers and target", func(*schemas.Trajectory) {}, true},
		{"reward and target, no gold answers", func(t *schemas.Trajectory) { t.Reward, t.GoldAnswers = &r, nil }, true},
		{"whitespace-only first gold", func(t *schemas.Trajectory) { t.GoldAnswers = []string{" \t\n", "y"} }, false},
		{"unicode whitespace first gold", func(t *schemas.Trajectory) { t.GoldAnswers = []string{"\u00a0\u3000\x1c"} }, false},
		{"empty first gold", func(t *schemas.Trajectory) { t.GoldAnswers = []string{""} }, false},
		{"no target", func(t *schemas.Trajectory) { t.GoldTarget, t.GoldSpan = nil, [2]int32{} }, false},
	} {
		tr := sampleTrajectory()
		tc.mut(tr)
		p, err := PlanLAPO(tr, Backward, credit.DefaultConfig(), ids(99))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(p.rows) > 0; got != tc.scored {
			t.Errorf("%s: scored = %v (%d rows), want %v", tc.name, got, len(p.rows), tc.scored)
		}
		if p.noGoldTarget == tc.scored {
			t.Errorf("%s: noGoldTarget = %v, want %v", tc.name, p.noGoldTarget, !tc.scored)
		}
	}
}

// Every LAPO row carries the trajectory's sampling temperature (as the
// decimal the rollout worker set: float32 0.7 is sent as 0.7), or none (the
// scorer's default, 1) when the record has no temperature.
func TestPlanCarriesTemperature(t *testing.T) {
	tr := sampleTrajectory()
	temp := float32(0.7)
	tr.Temperature = &temp
	for _, dir := range vocab.Directions {
		p, err := PlanLAPO(tr, dir, credit.DefaultConfig(), ids(99))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range p.rows {
			if r.Temperature != 0.7 {
				t.Errorf("%s row %d: temperature %v, want 0.7", dir, i, r.Temperature)
			}
		}
	}
	tr.Temperature = nil
	p, _ := PlanLAPO(tr, Backward, credit.DefaultConfig(), ids(99))
	for i, r := range p.rows {
		if r.Temperature != 0 {
			t.Errorf("row %d: temperature %v without one on the record, want 0 (the scorer's 1)", i, r.Temperature)
		}
	}
}
