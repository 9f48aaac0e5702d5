package credit

import (
	"math"
	"sort"
)

// docs/method.md §2: LAPO. §2.1 decides which turns are eligible; §2.2 turns the raw
// gains Δ of a group's eligible turns into process advantages. Every
// function here works on the flat list of a group's eligible Δ values
// (all trajectories of the group, eligible turns only, in any fixed order).

// AnswerTurn returns the index of the answer turn that §2.1 leaves out of
// c_full: the last turn when its kind is "answer"; -1 when the trajectory
// has no turns or its last turn is not an answer (it hit the turn limit).
func AnswerTurn(turns []Turn) int {
	if n := len(turns); n > 0 && turns[n-1].Kind == KindAnswer {
		return n - 1
	}
	return -1
}

// EligibleForScoring is the docs/method.md §2.1 rule with the default choice for
// trajectories without an answer turn (the non-empty-segments rule still
// applies). A turn is eligible when it is not the answer turn, its kind is in
// kinds, and it has at least one assistant token and at least one
// environment token. It needs no Δ: the score stage uses it to decide which
// turns to score.
func EligibleForScoring(turns []Turn, kinds []string) []bool {
	return eligible(turns, kinds, false)
}

// EligibleTurns is the §2.1 rule under c: EligibleForScoring with
// c.EligibleKinds, and with c.NoAnswerEmptySegmentsEligible deciding whether
// a trajectory without an answer turn makes every turn of an eligible kind
// eligible regardless of its segment lengths.
func (c Config) EligibleTurns(turns []Turn) []bool {
	return eligible(turns, c.EligibleKinds, c.NoAnswerEmptySegmentsEligible)
}

func eligible(turns []Turn, kinds []string, noAnswerSkipsSegments bool) []bool {
	ans := AnswerTurn(turns)
	out := make([]bool, len(turns))
	for t, turn := range turns {
		if t == ans || !contains(kinds, turn.Kind) {
			continue
		}
		if ans < 0 && noAnswerSkipsSegments {
			out[t] = true
			continue
		}
		out[t] = turn.ActionTokens > 0 && turn.ObservationTokens > 0
	}
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// FiniteGain is §2.1's "a non-finite Δ becomes 0".
func FiniteGain(d float64) float64 {
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return 0
	}
	return d
}

// Median of xs; the mean of the two middle values for an even count; 0 for
// no values. xs is not modified.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Tau is §2.2 step 1: D_g = { |Δ| : |Δ| > ε_ig }; τ_g = median(D_g) + ε_ig,
// or τ_g = ε_ig when D_g is empty.
func Tau(deltas []float64, epsIG float64) float64 {
	var d []float64
	for _, x := range deltas {
		if a := math.Abs(x); a > epsIG {
			d = append(d, a)
		}
	}
	if len(d) == 0 {
		return epsIG
	}
	return Median(d) + epsIG
}

// BoundedGains is §2.2 step 2: z = tanh(Δ / τ_g). |z| ≤ 1.
func BoundedGains(deltas []float64, tau float64) []float64 {
	z := make([]float64, len(deltas))
	for i, d := range deltas {
		z[i] = math.Tanh(d / tau)
	}
	return z
}

// Center is §2.2 step 3: z̃ = (z − mean z) / (std z + ε_z), population std
// over the group's eligible turns. A single value gives z̃ = 0.
func Center(z []float64, epsZ float64) []float64 {
	m, sd := Mean(z), PopStd(z)
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = (v - m) / (sd + epsZ)
	}
	return out
}

// Gate is §2.2 step 4: gate = 1 when Δ and z̃ have the same strict sign
// (Δ · z̃ > 0 in exact arithmetic; a zero gain never passes), else 0. The
// signs are compared rather than the product formed, which underflows to 0
// for tiny values (Δ = z̃ = 1e-200).
func Gate(deltas, znorm []float64) []int {
	g := make([]int, len(deltas))
	for i := range deltas {
		d, z := deltas[i], znorm[i]
		if (d > 0 && z > 0) || (d < 0 && z < 0) {
			g[i] = 1
		}
	}
	return g
}

// ProcessAdvantage is §2.2 step 4: A_proc = gate · z̃ with gating, z̃ without.
func ProcessAdvantage(znorm []float64, gate []int, gated bool) []float64 {
	out := make([]float64, len(znorm))
	for i, v := range znorm {
		if !gated || gate[i] == 1 {
			out[i] = v
		}
	}
	return out
}

// LAPOSteps runs §2.2 steps 1–4 on a group's eligible gains (non-finite
// values already replaced by 0) and returns every intermediate value.
type LAPOSteps struct {
	Tau   float64
	Z     []float64
	ZNorm []float64
	Gate  []int
	AProc []float64
}

// RunLAPO computes LAPOSteps for deltas under cfg (EpsIG, EpsZ, Gate).
func RunLAPO(deltas []float64, cfg Config) LAPOSteps {
	tau := Tau(deltas, cfg.EpsIG)
	z := BoundedGains(deltas, tau)
	zn := Center(z, cfg.EpsZ)
	g := Gate(deltas, zn)
	return LAPOSteps{Tau: tau, Z: z, ZNorm: zn, Gate: g, AProc: ProcessAdvantage(zn, g, cfg.Gate)}
}

// TokenAdvantage is §2.2 step 5 for one turn: A_out + λ · A_proc for the
// assistant tokens of an eligible turn, A_out for every other turn.
func TokenAdvantage(aOut, lambda, aProc float64, eligible bool) float64 {
	if !eligible {
		return aOut
	}
	return aOut + lambda*aProc
}
