package credit

import (
	"math"
	"math/rand"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestTauKnownValues(t *testing.T) {
	// docs/method.md §2.3: a = [[1, 2], [−1]] → τ_a = 1 + 1e-6; b = [[10]] → 10 + 1e-6.
	if got := Tau([]float64{1, 2, -1}, 1e-6); got != 1+1e-6 {
		t.Errorf("τ_a = %v, want 1+1e-6", got)
	}
	if got := Tau([]float64{10}, 1e-6); got != 10+1e-6 {
		t.Errorf("τ_b = %v, want 10+1e-6", got)
	}
	// Empty D_g (all |Δ| ≤ ε_ig): τ = ε_ig.
	if got := Tau([]float64{0, 1e-6, -5e-7}, 1e-6); got != 1e-6 {
		t.Errorf("τ with empty D_g = %v, want ε_ig", got)
	}
	// Even count: mean of the two middle values; values ≤ ε_ig are not in D_g.
	if got := Tau([]float64{1, -4, 3, 2, 0}, 1e-6); got != 2.5+1e-6 {
		t.Errorf("τ even = %v, want 2.5+1e-6", got)
	}
}

func TestGatingKnownValues(t *testing.T) {
	// docs/method.md §2.3: one trajectory [0, 0.1, 10] → gated [0, 0, > 0].
	s := RunLAPO([]float64{0, 0.1, 10}, DefaultConfig())
	if s.ZNorm[0] >= 0 || s.ZNorm[1] >= 0 {
		t.Errorf("centering should turn the first two negative: %v", s.ZNorm)
	}
	if s.AProc[0] != 0 || s.AProc[1] != 0 || !(s.AProc[2] > 0) {
		t.Errorf("gated = %v, want [0, 0, > 0]", s.AProc)
	}
	if s.Gate[0] != 0 || s.Gate[1] != 0 || s.Gate[2] != 1 {
		t.Errorf("gate = %v, want [0 0 1]", s.Gate)
	}
	// Ungated keeps z̃.
	cfg := DefaultConfig()
	cfg.Gate = false
	u := RunLAPO([]float64{0, 0.1, 10}, cfg)
	for i := range u.AProc {
		if u.AProc[i] != u.ZNorm[i] {
			t.Errorf("ungated A_proc[%d] = %v, want z̃ = %v", i, u.AProc[i], u.ZNorm[i])
		}
	}
	// All-zero gains: τ = ε_ig, every process advantage 0.
	z := RunLAPO([]float64{0, 0, 0, 0}, DefaultConfig())
	if z.Tau != 1e-6 {
		t.Errorf("all-zero τ = %v", z.Tau)
	}
	for i, v := range z.AProc {
		if v != 0 || z.ZNorm[i] != 0 {
			t.Errorf("all-zero: A_proc %v z̃ %v", z.AProc, z.ZNorm)
		}
	}
}

func TestTable6(t *testing.T) {
	// Paper Table 6: λ = 0.5; ungated z̃ = +0.550 adds +0.275, −0.558 adds
	// −0.279; both have Δ = 0, so the gate removes them.
	zn := []float64{0.550, -0.558}
	deltas := []float64{0, 0}
	g := Gate(deltas, zn)
	gated := ProcessAdvantage(zn, g, true)
	ungated := ProcessAdvantage(zn, g, false)
	if d := TokenAdvantage(0, 0.5, ungated[0], true); !near(d, 0.275, 1e-12) {
		t.Errorf("ungated +0.550 adds %v", d)
	}
	if d := TokenAdvantage(0, 0.5, ungated[1], true); !near(d, -0.279, 1e-12) {
		t.Errorf("ungated −0.558 adds %v", d)
	}
	if gated[0] != 0 || gated[1] != 0 {
		t.Errorf("gated = %v, want [0 0]", gated)
	}
}

func TestEligibleMaskOneValue(t *testing.T) {
	// docs/method.md §2.3: eligible mask [yes, no, no] on [1, 0, 0]: one eligible
	// value, so z̃ = 0 everywhere.
	d := func(v float64) *float64 { return &v }
	r := 1.0
	m := Member{TrajectoryID: "t", PromptID: "p", GroupSize: 1, Reward: &r, Turns: []Turn{
		{Kind: KindSearch, ActionTokens: 3, ObservationTokens: 4, Delta: d(1)},
		{Kind: KindSearch, ActionTokens: 3, ObservationTokens: 0, Delta: d(0)}, // empty observation
		{Kind: KindAnswer, ActionTokens: 2, Delta: d(0)},                       // answer turn
	}}
	res, err := ComputeGroup([]Member{m}, false, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := res[0].Turns
	if !tr[0].Eligible || tr[1].Eligible || tr[2].Eligible {
		t.Fatalf("eligible = %v %v %v, want yes no no", tr[0].Eligible, tr[1].Eligible, tr[2].Eligible)
	}
	if *tr[0].ZNorm != 0 || tr[0].ProcessAdvantage != 0 || tr[1].ZNorm != nil || tr[1].Delta != nil {
		t.Errorf("z̃ = %v, A_proc = %v, ineligible delta %v", *tr[0].ZNorm, tr[0].ProcessAdvantage, tr[1].Delta)
	}
	if *tr[0].Z != math.Tanh(1/(1+1e-6)) {
		t.Errorf("z = %v", *tr[0].Z)
	}
}

func TestEligibility(t *testing.T) {
	turns := []Turn{
		{Kind: KindSearch, ActionTokens: 1, ObservationTokens: 1},
		{Kind: KindTool, ActionTokens: 1, ObservationTokens: 1},
		{Kind: KindSearch, ActionTokens: 0, ObservationTokens: 1},
		{Kind: KindSearch, ActionTokens: 1, ObservationTokens: 0},
		{Kind: KindAnswer, ActionTokens: 1},
	}
	want := []bool{true, false, false, false, false}
	got := EligibleForScoring(turns, []string{KindSearch})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("with answer: %v, want %v", got, want)
		}
	}
	if AnswerTurn(turns) != 4 {
		t.Errorf("AnswerTurn = %d", AnswerTurn(turns))
	}
	got = EligibleForScoring(turns, []string{KindSearch, KindTool})
	if !got[1] {
		t.Errorf("tool kind configured but not eligible")
	}
	// No answer turn: the last search turn is eligible when it has both
	// segments; with the switch every search turn is.
	noAns := turns[:4]
	if AnswerTurn(noAns) != -1 {
		t.Errorf("AnswerTurn without answer = %d", AnswerTurn(noAns))
	}
	got = EligibleForScoring(noAns, []string{KindSearch})
	if !got[0] || got[2] || got[3] {
		t.Errorf("no answer, default rule: %v", got)
	}
	cfg := DefaultConfig()
	cfg.NoAnswerEmptySegmentsEligible = true
	got = cfg.EligibleTurns(noAns)
	if !got[0] || got[1] || !got[2] || !got[3] {
		t.Errorf("no answer, switch on: %v", got)
	}
	// The switch does not touch trajectories that have an answer turn.
	got = cfg.EligibleTurns(turns)
	if got[2] || got[3] {
		t.Errorf("switch leaked into answered trajectory: %v", got)
	}
	// An answer kind in the middle is not "the answer turn".
	mid := []Turn{{Kind: KindAnswer, ActionTokens: 1, ObservationTokens: 1}, {Kind: KindSearch, ActionTokens: 1, ObservationTokens: 1}}
	if AnswerTurn(mid) != -1 {
		t.Errorf("answer turn must be the last turn")
	}
}

func TestLAPOProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for it := 0; it < 2000; it++ {
		n := 1 + rng.Intn(15)
		d := make([]float64, n)
		for i := range d {
			switch rng.Intn(4) {
			case 0:
				d[i] = 0
			case 1:
				d[i] = rng.NormFloat64() * 1e-7
			default:
				d[i] = rng.NormFloat64() * math.Pow(10, float64(rng.Intn(6)-3))
			}
		}
		s := RunLAPO(d, DefaultConfig())
		if !(s.Tau > 0) {
			t.Fatalf("τ = %v", s.Tau)
		}
		for i := range d {
			if math.Abs(s.Z[i]) > 1 {
				t.Fatalf("|z| > 1: %v", s.Z[i])
			}
			pass := d[i]*s.ZNorm[i] > 0
			if (s.Gate[i] == 1) != pass {
				t.Fatalf("gate %d for Δ=%v z̃=%v", s.Gate[i], d[i], s.ZNorm[i])
			}
			if d[i] == 0 && (s.Gate[i] != 0 || s.AProc[i] != 0) {
				t.Fatalf("zero gain passed the gate")
			}
			if s.AProc[i] != 0 && math.Signbit(s.AProc[i]) != math.Signbit(d[i]) {
				t.Fatalf("A_proc sign disagrees with Δ: %v vs %v", s.AProc[i], d[i])
			}
		}
		if m := Mean(s.ZNorm); math.Abs(m) > 1e-9 {
			t.Fatalf("mean z̃ = %v, want 0", m)
		}
		// Population std of z̃ is std/(std+ε_z) ≤ 1.
		if sd := PopStd(s.ZNorm); sd > 1+1e-12 {
			t.Fatalf("std z̃ = %v > 1", sd)
		}
		// τ is the median of D_g + ε_ig: at most half of D_g lies strictly above it.
		above := 0
		inD := 0
		for _, v := range d {
			if math.Abs(v) > 1e-6 {
				inD++
				if math.Abs(v) > s.Tau {
					above++
				}
			}
		}
		if above > inD/2 {
			t.Fatalf("%d of %d values above τ", above, inD)
		}
	}
}

func TestComputeGroupLAPO(t *testing.T) {
	d := func(v float64) *float64 { return &v }
	r0, r1 := 0.0, 1.0
	nan := math.NaN()
	ms := []Member{
		{TrajectoryID: "a", PromptID: "p", Reward: &r0, Turns: []Turn{
			{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 3, Delta: d(1)},
			{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 3, Delta: d(2)},
			{Kind: KindAnswer, ActionTokens: 2},
		}},
		{TrajectoryID: "b", PromptID: "p", Reward: &r1, Turns: []Turn{
			{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 3, Delta: d(-1)},
			{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 3, Delta: &nan}, // → 0
			{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 3},              // no delta: ineligible
			{Kind: KindAnswer, ActionTokens: 2},
		}},
	}
	res, err := ComputeGroup(ms, true, DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Eligible Δ = [1, 2, −1, 0]; τ = median{1,2,1} + ε = 1 + 1e-6.
	deltas := []float64{1, 2, -1, 0}
	tau := 1 + 1e-6
	z := make([]float64, 4)
	for i, v := range deltas {
		z[i] = math.Tanh(v / tau)
	}
	zn := Center(z, 1e-6)
	aOut := OutcomeAdvantages([]float64{0, 1}, 1e-6)
	got := []TurnResult{res[0].Turns[0], res[0].Turns[1], res[1].Turns[0], res[1].Turns[1]}
	for i, tr := range got {
		if !tr.Eligible || *tr.Z != z[i] || *tr.ZNorm != zn[i] || *tr.Delta != deltas[i] {
			t.Errorf("turn %d: %+v, want z %v z̃ %v", i, tr, z[i], zn[i])
		}
		a := aOut[0]
		if i >= 2 {
			a = aOut[1]
		}
		wantProc := 0.0
		if deltas[i]*zn[i] > 0 {
			wantProc = zn[i]
		}
		if tr.ProcessAdvantage != wantProc || tr.Advantage != a+0.5*wantProc {
			t.Errorf("turn %d: A_proc %v adv %v, want %v %v", i, tr.ProcessAdvantage, tr.Advantage, wantProc, a+0.5*wantProc)
		}
	}
	if tr := res[1].Turns[2]; tr.Eligible || tr.Advantage != aOut[1] || tr.Z != nil {
		t.Errorf("turn without delta: %+v", tr)
	}
	if tr := res[0].Turns[2]; tr.Eligible || tr.Advantage != aOut[0] {
		t.Errorf("answer turn: %+v", tr)
	}
	if !res[0].Partial || !res[1].Partial || res[0].AttnSR != nil {
		t.Errorf("partial flag / attnsr: %+v", res[0])
	}
}

// The gate compares signs: Δ·z̃ underflows to 0 for tiny values of the same
// sign, which must still pass (and tiny opposite signs must not).
func TestGateComparesSigns(t *testing.T) {
	d := []float64{1e-200, -1e-200, 1e-200, -1e-200, 0, 1e-300, 5}
	zn := []float64{1e-200, -1e-200, -1e-200, 1e-200, 1, 1e-300, -0.0}
	want := []int{1, 1, 0, 0, 0, 1, 0}
	g := Gate(d, zn)
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("Gate(Δ=%v, z̃=%v) = %d, want %d", d[i], zn[i], g[i], want[i])
		}
	}
}
