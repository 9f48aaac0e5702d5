package credit

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/creditflow/creditflow/vocab"
)

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func mat3(rows ...[]float64) [][]float64 { return rows }

// handMembers is the hand-computed example of TestAttnSRHandExample.
func handMembers() []Member {
	r1, r0 := 1.0, 0.0
	return []Member{
		{TrajectoryID: "h", PromptID: "p", Reward: &r1, PromptTokens: 2, Turns: []Turn{
			{Kind: KindTool, ActionTokens: 2, ObservationTokens: 1},
			{Kind: KindTool, ActionTokens: 1, ObservationTokens: 1},
			{Kind: KindAnswer, ActionTokens: 1},
		}, Attention: []LayerGraph{
			{Layer: 8,
				AA: mat3([]float64{0, 0, 0}, []float64{0.6, 0, 0}, []float64{0.1, 0.1, 0}),
				AO: mat3([]float64{0, 0, 0}, []float64{0.2, 0, 0}, []float64{0.1, 0, 0})},
			{Layer: 10,
				AA: mat3([]float64{0, 0, 0}, []float64{0.1, 0, 0}, []float64{0, 0.5, 0}),
				AO: mat3([]float64{0, 0, 0}, []float64{0.1, 0, 0}, []float64{0.1, 0, 0})},
		}},
		{TrajectoryID: "one", PromptID: "p", Reward: &r0, Turns: []Turn{{Kind: KindAnswer, ActionTokens: 3}}},
	}
}

// TestAttnSRHandExample checks docs/method.md §3.2–§3.3 on a 3-step trajectory worked
// out by hand (steps 0, 1 and terminal step 2; ρ = 0.9, η = 0.5, T = 1):
//
// Layer 8:  G = 0.5·AA + 0.5·AO → G[1,0] = 0.4, G[2,0] = 0.1, G[2,1] = 0.05.
//
//	a = [0.9·(0.045·0.4 + 1·0.1), 0.9·0.05, 1] = [0.1062, 0.045, 1].
//	log a_0 > log a_1 → norm = [+1, −1]; d = [2, 1] → norm = [+1, −1];
//	z = [1.5, −1.5] → p⁸ = [σ(3), σ(−3)] = [0.95257412682243, 0.04742587317757].
//	m⁸ = 0.1 + 0.1 + 0.1 + 0 = 0.3 → focus min(1, 0.3/0.5) = 0.6.
//
// Layer 10: G[1,0] = 0.1, G[2,0] = 0.05, G[2,1] = 0.25.
//
//	a = [0.9·(0.225·0.1 + 0.05), 0.225, 1] = [0.06525, 0.225, 1].
//	norm log a = [−1, +1]; z = [−0.5, 0.5] → p¹⁰ = [σ(−1), σ(1)].
//	m¹⁰ = 0 + 0.5 + 0.1 + 0 = 0.6 → focus 1.
//
// Fusion: q_k = sqrt(p⁸_k p¹⁰_k); q_0/q_1 = sqrt(e³·e⁻¹) = e, so
// p = [σ(1), σ(−1)] = [0.73105857863001, 0.26894142136999].
// TV(p⁸, p) = σ(3) − σ(1) = 0.22151554819243; TV(p¹⁰, p) = σ(1) − σ(−1) =
// 0.46211715726001; Q = 1 − 0.34181635272622 = 0.65818364727378;
// F = (0.6 + 1)/2 = 0.8; C = F·Q = 0.52654691781902.
//
// Group {h: R = 1, one: R = 0, K = 1} with EMA (0.3, t = 1): M = 0.5,
// R̄ = 0.99·0.3 + 0.01·0.5 = 0.302; B_h = 0.25·C·0.698 = 0.09188243715942;
// s = B_h·p. A_out = ±0.5/(0.5 + 1e-6).
// GRPO: ω = [1 − C + 2Cσ(1), 1 − C + 2Cσ(−1), 1] over 2, 1, 1 tokens;
// w̃ = ω / ((2ω_0 + ω_1 + 1)/4); A' = A_out·(0.75 + 0.25·w̃).
func TestAttnSRHandExample(t *testing.T) {
	ms := handMembers()
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	ema := EMA{Value: 0.3, Count: 1}
	res, err := ComputeGroup(ms, false, cfg, &ema)
	if err != nil {
		t.Fatal(err)
	}
	const tol = 1e-9
	a8 := Backtrack(StepGraph(ms[0].Attention[0].AA, ms[0].Attention[0].AO), 0.9)
	if !near(a8[0], 0.1062, tol) || !near(a8[1], 0.045, tol) || a8[2] != 1 {
		t.Errorf("a⁸ = %v", a8)
	}
	a10 := Backtrack(StepGraph(ms[0].Attention[1].AA, ms[0].Attention[1].AO), 0.9)
	if !near(a10[0], 0.06525, tol) || !near(a10[1], 0.225, tol) {
		t.Errorf("a¹⁰ = %v", a10)
	}
	if z := Recency(a8, 0.5, 1e-8); !near(z[0], 1.5, tol) || !near(z[1], -1.5, tol) {
		t.Errorf("z⁸ = %v", z)
	}
	h := res[0]
	if !near(*h.Turns[0].P, 0.7310585786300049, tol) || !near(*h.Turns[1].P, 0.2689414213699951, tol) || h.Turns[2].P != nil {
		t.Errorf("p = %v %v %v", *h.Turns[0].P, *h.Turns[1].P, h.Turns[2].P)
	}
	C := 0.8 * (1 - ((sigmoid(3)-sigmoid(1))+(sigmoid(1)-sigmoid(-1)))/2)
	if !near(C, 0.52654691781902, 1e-12) {
		t.Fatalf("closed form C = %v", C)
	}
	a := h.AttnSR
	if !near(a.Focus, 0.8, tol) || !near(a.Consensus, 0.65818364727378, 1e-12) || !near(a.Confidence, C, tol) {
		t.Errorf("F %v Q %v C %v", a.Focus, a.Consensus, a.Confidence)
	}
	if !near(a.Baseline, 0.302, 1e-15) || ema.Value != a.Baseline || ema.Count != 2 {
		t.Errorf("baseline %v ema %+v", a.Baseline, ema)
	}
	B := 0.25 * C * 0.698
	if !near(a.Budget, B, tol) || !near(B, 0.09188243715942, 1e-12) {
		t.Errorf("budget %v want %v", a.Budget, B)
	}
	if !near(*h.Turns[0].StepReward, B*sigmoid(1), tol) || !near(*h.Turns[1].StepReward, B*sigmoid(-1), tol) || h.Turns[2].StepReward != nil {
		t.Errorf("step rewards %v %v", *h.Turns[0].StepReward, *h.Turns[1].StepReward)
	}
	w := []float64{1 - C + 2*C*sigmoid(1), 1 - C + 2*C*sigmoid(-1), 1}
	mean := (2*w[0] + w[1] + 1) / 4
	aOut := 0.5 / (0.5 + 1e-6)
	for k := range w {
		if !near(*h.Turns[k].Weight, w[k]/mean, tol) {
			t.Errorf("w̃_%d = %v want %v", k, *h.Turns[k].Weight, w[k]/mean)
		}
		if want := aOut * (0.75 + 0.25*w[k]/mean); !near(h.Turns[k].Advantage, want, tol) {
			t.Errorf("A'_%d = %v want %v", k, h.Turns[k].Advantage, want)
		}
	}
	// K = 1: no allocation, C = 0, terminal reward only; weight 1, A' = A_out.
	o := res[1]
	if o.AttnSR.Confidence != 0 || o.AttnSR.Budget != 0 || o.Turns[0].P != nil || o.Turns[0].StepReward != nil {
		t.Errorf("K=1: %+v %+v", o.AttnSR, o.Turns[0])
	}
	if *o.Turns[0].Weight != 1 || o.Turns[0].Advantage != -aOut {
		t.Errorf("K=1 weight %v adv %v", *o.Turns[0].Weight, o.Turns[0].Advantage)
	}
	// PPO token rewards: R at the final step's last assistant token, s_k at
	// step k's last assistant token. Layout: prompt 2 | A0 2, O0 1 | A1 1,
	// O1 1 | A2 1 → positions 3, 5, 7.
	cfg.Output = OutputPPO
	ema = EMA{Value: 0.3, Count: 1}
	res, err = ComputeGroup(ms, false, cfg, &ema)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Turns[0].Weight != nil || res[0].Turns[0].Advantage != 0 {
		t.Errorf("ppo must not reweight: %+v", res[0].Turns[0])
	}
	adv, mask, tr := TokenArrays(ms[0], res[0], cfg)
	if adv != nil || len(mask) != 8 || len(tr) != 8 {
		t.Fatalf("ppo arrays: adv %v mask %v tr %v", adv, mask, tr)
	}
	wantTR := []float64{0, 0, 0, B * sigmoid(1), 0, B * sigmoid(-1), 0, 1}
	wantMask := []uint8{0, 0, 1, 1, 0, 1, 0, 1}
	for i := range wantTR {
		if !near(tr[i], wantTR[i], tol) || mask[i] != wantMask[i] {
			t.Errorf("token %d: reward %v mask %d, want %v %d", i, tr[i], mask[i], wantTR[i], wantMask[i])
		}
	}
}

func TestAttnSRLayers(t *testing.T) {
	eq := func(a, b []int) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if got := AttnSRLayers(28); !eq(got, []int{8, 10, 12, 14, 16, 18}) {
		t.Errorf("28 → %v", got)
	}
	if got := AttnSRLayers(36); !eq(got, []int{10, 13, 16, 18, 21, 23}) {
		t.Errorf("36 → %v", got)
	}
	for n := 1; n < 200; n++ {
		got := AttnSRLayers(n)
		for i, l := range got {
			if l < 0 || l >= n || (i > 0 && got[i-1] >= l) {
				t.Fatalf("%d layers → %v", n, got)
			}
		}
		if n >= 28 && len(got) != 6 {
			t.Fatalf("%d layers → %v, want 6", n, got)
		}
	}
	if AttnSRLayers(0) != nil {
		t.Error("0 layers must give nil")
	}
}

func TestEMASequence(t *testing.T) {
	var e EMA
	ms := []float64{0.2, 1, 0, 0.5}
	want := 0.2
	if got := e.Update(ms[0], 0.99); got != 0.2 || e.Count != 1 {
		t.Fatalf("R̄_1 = %v (count %d), want M_1", got, e.Count)
	}
	for _, m := range ms[1:] {
		want = 0.99*want + 0.01*m
		if got := e.Update(m, 0.99); got != want {
			t.Fatalf("R̄ = %v want %v", got, want)
		}
	}
	if e.Count != 4 {
		t.Errorf("count %d", e.Count)
	}
}

func TestZeroFocusAndDegenerate(t *testing.T) {
	// Terminal row all zero: every layer's m = 0 → focus 0 → C = 0, B = 0,
	// every ω = 1, and the trajectory gets plain A_out.
	k := 4
	zero := func() [][]float64 {
		m := make([][]float64, k)
		for i := range m {
			m[i] = make([]float64, k)
		}
		return m
	}
	aa, ao := zero(), zero()
	aa[1][0], aa[2][1], ao[2][0] = 0.3, 0.2, 0.1
	r := 1.0
	m := Member{TrajectoryID: "z", PromptID: "p", Reward: &r, Turns: make([]Turn, k), Attention: []LayerGraph{{Layer: 3, AA: aa, AO: ao}}}
	for i := range m.Turns {
		m.Turns[i] = Turn{Kind: KindOther, ActionTokens: 1 + i}
	}
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	var e EMA
	res, err := ComputeGroup([]Member{m}, false, cfg, &e)
	if err != nil {
		t.Fatal(err)
	}
	a := res[0].AttnSR
	if a.Focus != 0 || a.Confidence != 0 || a.Budget != 0 {
		t.Errorf("zero focus: %+v", a)
	}
	for i, tr := range res[0].Turns {
		if *tr.Weight != 1 || tr.Advantage != 0 {
			t.Errorf("turn %d: weight %v adv %v", i, *tr.Weight, tr.Advantage)
		}
	}
	// p still sums to 1 over the K−1 steps.
	s := 0.0
	for _, tr := range res[0].Turns[:k-1] {
		s += *tr.P
	}
	if !near(s, 1, 1e-12) {
		t.Errorf("Σp = %v", s)
	}
	// All a_k below ε and d norm only: ZScore of equal values is exactly 0.
	if z := ZScore([]float64{0.1, 0.1, 0.1}); z[0] != 0 || z[1] != 0 || z[2] != 0 {
		t.Errorf("ZScore of equal values = %v", z)
	}
}

// randomGraph returns a K×K lower-triangular matrix whose rows sum to at
// most `mass` (attention probabilities summed per step).
func randomGraph(rng *rand.Rand, k int, mass float64) [][]float64 {
	g := make([][]float64, k)
	for j := range g {
		g[j] = make([]float64, k)
		if j == 0 {
			continue
		}
		s := 0.0
		for c := 0; c < j; c++ {
			g[j][c] = rng.Float64()
			if rng.Intn(5) == 0 {
				g[j][c] = 0
			}
			s += g[j][c]
		}
		if s > 0 {
			f := mass * rng.Float64() / s
			for c := 0; c < j; c++ {
				g[j][c] *= f
			}
		}
	}
	return g
}

func TestAttnSRProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	var e EMA
	for it := 0; it < 300; it++ {
		n := 1 + rng.Intn(5)
		ms := make([]Member, n)
		for i := range ms {
			k := 1 + rng.Intn(7)
			r := rng.Float64()
			if rng.Intn(3) == 0 {
				r = float64(rng.Intn(2))
			}
			m := Member{TrajectoryID: string(rune('a' + i)), PromptID: "p", Reward: &r, PromptTokens: rng.Intn(4)}
			for c := 0; c < k; c++ {
				m.Turns = append(m.Turns, Turn{Kind: KindTool, ActionTokens: rng.Intn(4), ObservationTokens: rng.Intn(3)})
			}
			for l := 0; l < 1+rng.Intn(3); l++ {
				m.Attention = append(m.Attention, LayerGraph{Layer: l, AA: randomGraph(rng, k, 0.5), AO: randomGraph(rng, k, 0.5)})
			}
			ms[i] = m
		}
		res, err := ComputeGroup(ms, false, cfg, &e)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			a := r.AttnSR
			if a.Confidence < 0 || a.Confidence > 1 || a.Focus < 0 || a.Focus > 1 || a.Consensus < 0 || a.Consensus > 1+1e-12 {
				t.Fatalf("C %v F %v Q %v out of [0,1]", a.Confidence, a.Focus, a.Consensus)
			}
			if math.Abs(a.Budget) > cfg.Beta {
				t.Fatalf("|B| = %v > β", a.Budget)
			}
			sumAbs := 0.0
			for _, tr := range r.Turns {
				if tr.StepReward != nil {
					sumAbs += math.Abs(*tr.StepReward)
				}
			}
			if !near(sumAbs, math.Abs(a.Budget), 1e-12) {
				t.Fatalf("Σ|s| = %v, |B| = %v", sumAbs, math.Abs(a.Budget))
			}
			// GRPO reweighting keeps the mean advantage over assistant tokens.
			adv, mask, _ := TokenArrays(ms[i], r, cfg)
			s, cnt := 0.0, 0
			for u := range adv {
				if mask[u] == 1 {
					s += adv[u]
					cnt++
				} else if adv[u] != 0 {
					t.Fatalf("advantage %v on a non-policy token", adv[u])
				}
			}
			if cnt > 0 && !near(s/float64(cnt), r.OutcomeAdvantage, 1e-9*math.Max(1, math.Abs(r.OutcomeAdvantage))) {
				t.Fatalf("mean advantage %v, A_out %v", s/float64(cnt), r.OutcomeAdvantage)
			}
			if len(ms[i].Turns) == 1 && (a.Confidence != 0 || a.Budget != 0) {
				t.Fatalf("K = 1 with C = %v", a.Confidence)
			}
		}
	}
	if e.Count != 300 {
		t.Errorf("EMA batches %d, want one per group", e.Count)
	}
}

func TestTokenArraysLAPO(t *testing.T) {
	d := func(v float64) *float64 { return &v }
	r := 0.5
	m := Member{TrajectoryID: "t", PromptID: "p", Reward: &r, PromptTokens: 3, Turns: []Turn{
		{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 2, Delta: d(0.3)},
		{Kind: KindSearch, ActionTokens: 0, ObservationTokens: 1},
		{Kind: KindAnswer, ActionTokens: 1},
	}}
	cfg := DefaultConfig()
	res, err := ComputeGroup([]Member{m}, false, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	adv, mask, tr := TokenArrays(m, res[0], cfg)
	if len(adv) != 9 || len(mask) != 9 || tr != nil {
		t.Fatalf("lengths %d %d %v", len(adv), len(mask), tr)
	}
	wantMask := []uint8{0, 0, 0, 1, 1, 0, 0, 0, 1}
	for i := range mask {
		if mask[i] != wantMask[i] {
			t.Fatalf("mask %v want %v", mask, wantMask)
		}
		if mask[i] == 0 && adv[i] != 0 {
			t.Fatalf("advantage on non-policy token %d", i)
		}
	}
	if adv[3] != res[0].Turns[0].Advantage || adv[8] != res[0].Turns[2].Advantage {
		t.Errorf("advantages %v", adv)
	}
}

func TestPPOPlacementOfEmptySteps(t *testing.T) {
	// Steps with no assistant tokens place their reward on the last
	// assistant token before them, or the first one after them.
	m := Member{PromptTokens: 1, Turns: []Turn{
		{ActionTokens: 0, ObservationTokens: 2}, // → first token of step 1
		{ActionTokens: 2, ObservationTokens: 1},
		{ActionTokens: 0, ObservationTokens: 1}, // → last token of step 1
		{ActionTokens: 0},                       // final, empty → last token of step 1
	}}
	r := Result{Reward: 1, Turns: []TurnResult{{StepReward: ptr(0.1)}, {StepReward: ptr(0.2)}, {StepReward: ptr(0.3)}, {}}}
	cfg := DefaultConfig()
	cfg.Method, cfg.Output = MethodAttnSR, OutputPPO
	_, mask, tr := TokenArrays(m, r, cfg)
	want := []float64{0, 0, 0, 0.1, 0.2 + 0.3 + 1, 0, 0}
	wantMask := []uint8{0, 0, 0, 1, 1, 0, 0}
	for i := range want {
		if !near(tr[i], want[i], 1e-15) || mask[i] != wantMask[i] {
			t.Fatalf("token rewards %v mask %v, want %v %v", tr, mask, want, wantMask)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Method = "x" },
		func(c *Config) { c.Output = "x" },
		func(c *Config) { c.EpsIG = 0 },
		func(c *Config) { c.EpsZ = -1 },
		func(c *Config) { c.T = 0 },
		func(c *Config) { c.Alpha = 1.5 },
		func(c *Config) { c.Delta = math.NaN() },
		func(c *Config) { c.Lambda = math.Inf(1) },
		func(c *Config) { c.EligibleKinds = []string{"search", "web"} },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	if (Config{}).Validate() == nil {
		t.Error("zero Config accepted")
	}
	// Member checks.
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	ms := handMembers()
	ms[0].Attention[1].AO = ms[0].Attention[1].AO[:2]
	e := EMA{}
	if _, err := ComputeGroup(ms, false, cfg, &e); err == nil || e.Count != 0 {
		t.Errorf("mis-shaped graph: err %v, ema %+v", err, e)
	}
	ms = handMembers()
	ms[0].Reward = nil
	if _, err := ComputeGroup(ms, false, cfg, &e); err == nil {
		t.Error("no reward and no gold answers accepted")
	}
	ms = handMembers()
	if _, err := ComputeGroup(ms, false, cfg, nil); err == nil {
		t.Error("attnsr without EMA accepted")
	}
	ms[1].TrajectoryID = "h"
	if _, err := ComputeGroup(ms, false, cfg, &e); err == nil {
		t.Error("duplicate trajectory accepted")
	}
}

func TestNegativeGraphEntryRejected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	ms := handMembers()
	ms[0].Attention[0].AO[2][1] = -0.1
	var e EMA
	if _, err := ComputeGroup(ms, false, cfg, &e); err == nil {
		t.Error("negative attention mass accepted")
	}
	// Entries on or above the diagonal are ignored, whatever they hold.
	ms = handMembers()
	ms[0].Attention[0].AO[0][2] = math.NaN()
	if _, err := ComputeGroup(ms, false, cfg, &e); err != nil {
		t.Errorf("entry above the diagonal was read: %v", err)
	}
}

func benchGroup(method vocab.Method) ([]Member, Config) {
	rng := rand.New(rand.NewSource(1))
	cfg := DefaultConfig()
	cfg.Method = method
	ms := make([]Member, 5)
	for i := range ms {
		r := rng.Float64()
		m := Member{TrajectoryID: fmt.Sprint(i), PromptID: "p", Reward: &r, PromptTokens: 200}
		k := 8
		for c := 0; c < k; c++ {
			d := rng.NormFloat64()
			m.Turns = append(m.Turns, Turn{Kind: KindSearch, ActionTokens: 50, ObservationTokens: 300, Delta: &d})
		}
		m.Turns[k-1].Kind = KindAnswer
		for l := 0; l < 6; l++ {
			m.Attention = append(m.Attention, LayerGraph{Layer: l, AA: randomGraph(rng, k, 0.5), AO: randomGraph(rng, k, 0.5)})
		}
		ms[i] = m
	}
	return ms, cfg
}

// BenchmarkComputeGroup measures one group of G = 5 trajectories with K = 8
// steps (AttnSR: 6 layers) and reports groups per second.
func BenchmarkComputeGroup(b *testing.B) {
	for _, method := range []vocab.Method{MethodLAPO, MethodAttnSR} {
		b.Run(string(method), func(b *testing.B) {
			ms, cfg := benchGroup(method)
			var e EMA
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := ComputeGroup(ms, false, cfg, &e); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "groups/s")
		})
	}
}

// ρ = 0 is a valid setting: no backtracked mass reaches the non-terminal
// steps, so only the recency term orders them. Hand example, both layers:
// a = [0, 0, 1] → log-term norm [0, 0]; d = [2, 1] → norm [+1, −1];
// z = [0.5, −0.5] → p = [σ(1), σ(−1)].
func TestRhoZeroAllowed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Method = MethodAttnSR
	cfg.Rho = 0
	if err := cfg.Validate(); err != nil {
		t.Fatalf("ρ = 0 rejected: %v", err)
	}
	ms := handMembers()
	al := Allocate(ms[0].Attention, 3, cfg)
	want := []float64{0.7310585786300049, 0.2689414213699951}
	for k, w := range want {
		if !near(al.P[k], w, 1e-12) {
			t.Errorf("p[%d] = %v, want %v", k, al.P[k], w)
		}
	}
	cfg.Rho = -0.1
	if cfg.Validate() == nil {
		t.Error("ρ < 0 accepted")
	}
}

// TestTokenBuffersReuse lays out members of growing and shrinking lengths
// into one TokenBuffers and checks every layout against a fresh one: reused
// memory must carry nothing over from the member before.
func TestTokenBuffersReuse(t *testing.T) {
	member := func(prompt, turns, act, obs int) Member {
		m := Member{PromptTokens: prompt}
		for k := 0; k < turns; k++ {
			m.Turns = append(m.Turns, Turn{Kind: KindSearch, ActionTokens: act + k, ObservationTokens: obs})
		}
		m.Turns = append(m.Turns, Turn{Kind: KindAnswer, ActionTokens: act})
		return m
	}
	result := func(m Member, seed float64) Result {
		r := Result{Reward: seed}
		for k := range m.Turns {
			r.Turns = append(r.Turns, TurnResult{Advantage: seed + float64(k), StepReward: ptr(seed / float64(k+1))})
		}
		return r
	}
	lapo, ppo := DefaultConfig(), DefaultConfig()
	ppo.Method, ppo.Output = MethodAttnSR, OutputPPO
	var b TokenBuffers
	for i, m := range []Member{member(0, 0, 0, 0), member(50, 6, 20, 40), member(3, 1, 2, 1), member(10, 3, 5, 0), member(200, 8, 30, 90), member(1, 0, 1, 0)} {
		for _, cfg := range []Config{lapo, ppo, lapo} {
			r := result(m, float64(i)+0.5)
			wantAdv, wantMask, wantTR := TokenArrays(m, r, cfg)
			adv, mask, tr := b.TokenArrays(m, r, cfg)
			if !slices.Equal(adv, wantAdv) || !slices.Equal(mask, wantMask) || !slices.Equal(tr, wantTR) {
				t.Fatalf("member %d, %s/%s: reused buffers differ from fresh ones", i, cfg.Method, cfg.Output)
			}
			if (adv == nil) != (wantAdv == nil) || (tr == nil) != (wantTR == nil) {
				t.Fatalf("member %d: nil arrays differ", i)
			}
		}
	}
}

// TestBacktrackGraphsMatches: the backtrack on aa and ao directly is
// Backtrack of the StepGraph, bit for bit, with rows of K entries or of the
// j left of the diagonal, on graphs whose entries include zeros, tiny and
// subnormal masses.
func TestBacktrackGraphsMatches(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for n := 0; n < 400; n++ {
		k := r.Intn(31)
		aa, ao := make([][]float64, k), make([][]float64, k)
		lower := r.Intn(2) == 0
		for j := range aa {
			w := k
			if lower {
				w = j
			}
			aa[j], ao[j] = make([]float64, w), make([]float64, w)
			for c := 0; c < w; c++ {
				for _, m := range [2][]float64{aa[j], ao[j]} {
					switch r.Intn(8) {
					case 0:
						m[c] = 0
					case 1:
						m[c] = math.SmallestNonzeroFloat64 * float64(1+r.Intn(9))
					default:
						m[c] = r.Float64() / float64(j+1)
					}
				}
			}
		}
		rho := []float64{0.9, 1, 0.5, 1.0 / 3}[r.Intn(4)]
		want, got := Backtrack(StepGraph(aa, ao), rho), backtrackGraphs(aa, ao, rho)
		for i := range want {
			if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
				t.Fatalf("K=%d lower=%v: a[%d] = %v, want %v", k, lower, i, got[i], want[i])
			}
		}
	}
}
