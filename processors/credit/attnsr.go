package credit

import (
	"math"

	"github.com/creditflow/creditflow/state"
)

// docs/method.md §3: AttnSR. Steps are indexed 0..K−1 here (docs/method.md writes 1..K); the
// terminal step is K−1 and the non-terminal steps are 0..K−2. Graphs are
// K×K with row j the querying step and column k the attended step; only
// entries with k < j are read.

// AttnSRLayers is the docs/method.md §3.1 layer mapping: the reference indices
// {8, 10, 12, 14, 16, 18} of a 28-layer model mapped to an n-layer model by
// floor((n−1)·l/27 + 0.5), computed in exact integer arithmetic. Indices
// that coincide on very shallow models are kept once. nil for n < 1.
func AttnSRLayers(numLayers int) []int {
	if numLayers < 1 {
		return nil
	}
	var out []int
	for _, l := range []int{8, 10, 12, 14, 16, 18} {
		// floor((n−1)l/27 + 1/2) = floor((2(n−1)l + 27) / 54)
		m := (2*(numLayers-1)*l + 27) / 54
		if len(out) == 0 || out[len(out)-1] != m {
			out = append(out, m)
		}
	}
	return out
}

// StepGraph is §3.1: G = 0.5 · G_AA + 0.5 · G_AO, entries k < j only
// (zero elsewhere).
func StepGraph(aa, ao [][]float64) [][]float64 {
	k := len(aa)
	g := make([][]float64, k)
	for j := range g {
		g[j] = make([]float64, k)
		for c := 0; c < j; c++ {
			g[j][c] = 0.5*aa[j][c] + 0.5*ao[j][c]
		}
	}
	return g
}

// backtrackGraphs is Backtrack(StepGraph(aa, ao), rho) without building G:
// the backtrack reads each G[j,k] (k < j) exactly once, so it computes it
// where it reads it, rounded to float64 as a stored G entry is, and the
// result is the same bit for bit (TestBacktrackGraphsMatches), with no
// K×K (or K(K−1)/2) graph allocated per layer.
func backtrackGraphs(aa, ao [][]float64, rho float64) []float64 {
	k := len(aa)
	a := make([]float64, k)
	if k == 0 {
		return a
	}
	a[k-1] = 1
	for c := k - 2; c >= 0; c-- {
		s := 0.0
		for j := c + 1; j < k; j++ {
			g := float64(0.5*aa[j][c] + 0.5*ao[j][c]) // §3.1, as StepGraph stores it
			s += a[j] * g
		}
		a[c] = rho * s
	}
	return a
}

// backtrackSum is backtrackGraphs on a graph in the sum form, s = G_AA +
// G_AO: G[j,k] = 0.5·s[j][k] (§3.1), which is 0.5·G_AA + 0.5·G_AO bit for
// bit wherever a record holds the sum form (schemas.SumForm checks it).
func backtrackSum(s [][]float64, rho float64) []float64 {
	k := len(s)
	a := make([]float64, k)
	if k == 0 {
		return a
	}
	a[k-1] = 1
	for c := k - 2; c >= 0; c-- {
		t := 0.0
		for j := c + 1; j < k; j++ {
			t += a[j] * (0.5 * s[j][c]) // §3.1
		}
		a[c] = rho * t
	}
	return a
}

// Backtrack is §3.2 step 1 on one layer's graph G: a_K = 1 and, for k from
// K−1 down to 1, a_k = ρ · Σ_{j>k} a_j · G[j,k]. Returns a for all K steps.
// It reads only G[j,k] with k < j (a row may hold only those).
func Backtrack(g [][]float64, rho float64) []float64 {
	k := len(g)
	a := make([]float64, k)
	if k == 0 {
		return a
	}
	a[k-1] = 1
	for c := k - 2; c >= 0; c-- {
		s := 0.0
		for j := c + 1; j < k; j++ {
			s += a[j] * g[j][c]
		}
		a[c] = rho * s
	}
	return a
}

// ZScore is the norm of §3.2 step 2: (x − mean) / std with the population
// std, and 0 everywhere when the std is 0. "std is 0" is decided exactly:
// when all values are equal the result is all zeros (so rounding in the
// mean of equal values cannot turn into ±1s).
func ZScore(xs []float64) []float64 {
	out := make([]float64, len(xs))
	if len(xs) == 0 {
		return out
	}
	allEqual := true
	for _, x := range xs[1:] {
		if x != xs[0] {
			allEqual = false
			break
		}
	}
	if allEqual {
		return out
	}
	m, sd := Mean(xs), PopStd(xs)
	if sd == 0 {
		return out
	}
	for i, x := range xs {
		out[i] = (x - m) / sd
	}
	return out
}

// Recency is §3.2 step 2 for the K−1 non-terminal steps:
// z_k = norm(log max(a_k, ε)) + η · norm(d_k), d_k = K − k (docs/method.md's 1-based
// k; with 0-based k it is K−1−k), norm = ZScore over k = 1..K−1.
// a holds all K values; the result has K−1.
func Recency(a []float64, eta, eps float64) []float64 {
	k := len(a)
	if k < 2 {
		return nil
	}
	logs := make([]float64, k-1)
	d := make([]float64, k-1)
	for c := 0; c < k-1; c++ {
		logs[c] = math.Log(math.Max(a[c], eps))
		d[c] = float64(k - 1 - c)
	}
	nl, nd := ZScore(logs), ZScore(d)
	z := make([]float64, k-1)
	for c := range z {
		z[c] = nl[c] + eta*nd[c]
	}
	return z
}

// Softmax is §3.2 step 3: p_k = exp(z_k / T) / Σ_h exp(z_h / T) (the maximum
// is subtracted first, which leaves the value unchanged).
func Softmax(z []float64, temperature float64) []float64 {
	p := make([]float64, len(z))
	if len(z) == 0 {
		return p
	}
	mx := math.Inf(-1)
	for _, v := range z {
		mx = math.Max(mx, v/temperature)
	}
	s := 0.0
	for i, v := range z {
		p[i] = math.Exp(v/temperature - mx)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// Fuse is §3.2 step 4: q_k = exp(mean_l log max(p^(l)_k, ε)), p_k = q_k / Σ q.
// perLayer[l] is p^(l); all have the same length.
func Fuse(perLayer [][]float64, eps float64) []float64 {
	if len(perLayer) == 0 {
		return nil
	}
	n := len(perLayer[0])
	q := make([]float64, n)
	s := 0.0
	for k := 0; k < n; k++ {
		m := 0.0
		for _, p := range perLayer {
			m += math.Log(math.Max(p[k], eps))
		}
		q[k] = math.Exp(m / float64(len(perLayer)))
		s += q[k]
	}
	for k := range q {
		q[k] /= s
	}
	return q
}

// FocusMass is §3.2 step 5 for one layer: m = Σ_{k<K} (G_AA[K,k] + G_AO[K,k]),
// the terminal step's attention mass on the earlier steps.
func FocusMass(aa, ao [][]float64) float64 {
	k := len(aa)
	if k == 0 {
		return 0
	}
	m := 0.0
	for c := 0; c < k-1; c++ {
		m += aa[k-1][c] + ao[k-1][c]
	}
	return m
}

// focusMassSum is FocusMass on a graph in the sum form: the terminal row's
// sums are the G_AA + G_AO it adds.
func focusMassSum(s [][]float64) float64 {
	k := len(s)
	if k == 0 {
		return 0
	}
	m := 0.0
	for c := 0; c < k-1; c++ {
		m += s[k-1][c]
	}
	return m
}

// Focus is F = mean_l min(1, m^(l) / m*) (§3.2 step 6); a layer with
// m^(l) = 0 contributes 0. 0 for no layers.
func Focus(masses []float64, mStar float64) float64 {
	if len(masses) == 0 {
		return 0
	}
	s := 0.0
	for _, m := range masses {
		if m != 0 {
			s += math.Min(1, m/mStar)
		}
	}
	return s / float64(len(masses))
}

// TV is the total variation distance, half the L1 distance.
func TV(p, q []float64) float64 {
	s := 0.0
	for i := range p {
		s += math.Abs(p[i] - q[i])
	}
	return s / 2
}

// Consensus is Q = 1 − mean_l TV(p^(l), p) (§3.2 step 6). 0 for no layers.
func Consensus(perLayer [][]float64, fused []float64) float64 {
	if len(perLayer) == 0 {
		return 0
	}
	s := 0.0
	for _, p := range perLayer {
		s += TV(p, fused)
	}
	return 1 - s/float64(len(perLayer))
}

// Budget is §3.3: B_i = β · C_i · (R_i − R̄_t).
func Budget(beta, confidence, reward, baseline float64) float64 {
	return beta * confidence * (reward - baseline)
}

// StepRewards is §3.3: s_k = B · p_k for the non-terminal steps k < K.
// Σ_k |s_k| = |B| because p sums to 1.
func StepRewards(budget float64, p []float64) []float64 {
	s := make([]float64, len(p))
	for k, v := range p {
		s[k] = budget * v
	}
	return s
}

// StepWeights is §3.3 (GRPO output): ω_k = (1 − C) + C · (K−1) · p_k for
// k < K and ω_K = 1. p has K−1 entries; the result has K.
func StepWeights(confidence float64, p []float64) []float64 {
	k := len(p) + 1
	w := make([]float64, k)
	for c, v := range p {
		w[c] = (1 - confidence) + confidence*float64(k-1)*v
	}
	w[k-1] = 1
	return w
}

// NormalizedWeights is w̃ per step: ω_k divided by the mean of w over the
// trajectory's assistant tokens, Σ_k n_k ω_k / Σ_k n_k with n_k the
// assistant token count of step k. A trajectory with no assistant tokens at
// all has nothing to reweight; then every step counts as one token.
func NormalizedWeights(omega []float64, actionTokens []int) []float64 {
	num, den := 0.0, 0.0
	for k, w := range omega {
		num += float64(actionTokens[k]) * w
		den += float64(actionTokens[k])
	}
	if den == 0 {
		num, den = 0, float64(len(omega))
		for _, w := range omega {
			num += w
		}
	}
	mean := num / den
	out := make([]float64, len(omega))
	for k, w := range omega {
		out[k] = w / mean
	}
	return out
}

// ReweightedAdvantage is §3.3 (GRPO output): A'_u = A_out · ((1 − α) + α · w̃_u).
func ReweightedAdvantage(aOut, alpha, wTilde float64) float64 {
	return aOut * ((1 - alpha) + alpha*wTilde)
}

// EMA is the AttnSR outcome baseline R̄_t and t, the number of batches seen
// (§3.3): R̄_1 = M_1; R̄_t = δ · R̄_{t−1} + (1 − δ) · M_t (EMA.Update). It is
// state: the partition core owns it and its snapshot persists it as it is
// (package state, which defines it).
type EMA = state.EMA

// Allocation is the per-trajectory result of §3.2: the fused allocation p
// over the K−1 non-terminal steps and the confidence parts.
type Allocation struct {
	P          []float64   // fused p_k, k < K (nil when K = 1)
	PerLayer   [][]float64 // p^(l)
	Masses     []float64   // m^(l)
	Focus      float64
	Consensus  float64
	Confidence float64
}

// Allocate runs §3.2 steps 1–6 on a trajectory's layer graphs (each K×K).
// K = 1 (or no layers): no allocation and C = 0.
func Allocate(layers []LayerGraph, k int, cfg Config) Allocation {
	if k < 2 || len(layers) == 0 {
		return Allocation{}
	}
	per := make([][]float64, len(layers))
	masses := make([]float64, len(layers))
	for i, lg := range layers {
		var a []float64
		if lg.Sum != nil { // the sum form: the same G and m, bit for bit
			a, masses[i] = backtrackSum(lg.Sum, cfg.Rho), focusMassSum(lg.Sum)
		} else {
			a, masses[i] = backtrackGraphs(lg.AA, lg.AO, cfg.Rho), FocusMass(lg.AA, lg.AO)
		}
		per[i] = Softmax(Recency(a, cfg.Eta, cfg.Eps), cfg.T)
	}
	p := Fuse(per, cfg.Eps)
	f := Focus(masses, cfg.MStar)
	q := Consensus(per, p)
	return Allocation{P: p, PerLayer: per, Masses: masses, Focus: f, Consensus: q, Confidence: f * q}
}
