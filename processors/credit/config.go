package credit

import (
	"fmt"
	"math"

	"github.com/creditflow/creditflow/vocab"
)

// Methods and AttnSR output forms accepted by Config (the names are vocab's).
const (
	MethodLAPO   = vocab.LAPO
	MethodAttnSR = vocab.AttnSR
	OutputGRPO   = vocab.OutputGRPO
	OutputPPO    = vocab.OutputPPO
)

// Turn kinds (docs/method.md, "Words").
const (
	KindSearch = "search"
	KindAnswer = "answer"
	KindTool   = "tool"
	KindOther  = "other"
)

// Config holds every hyperparameter of both methods. Start from
// DefaultConfig (every default of docs/method.md) and change what you need; the zero
// value is not a usable configuration (Validate rejects it).
type Config struct {
	// Method is a registered method's name (Register): MethodLAPO, MethodAttnSR, ….
	Method vocab.Method

	// EpsR is ε_R of the outcome advantage (docs/method.md §1). Default 1e-6.
	EpsR float64

	// LAPO (docs/method.md §2).

	// Lambda is λ, the weight of the process advantage. Default 0.5.
	Lambda float64
	// EpsIG is ε_ig of the robust scale τ_g. Default 1e-6.
	EpsIG float64
	// EpsZ is ε_z of the group normalization. Default 1e-6.
	EpsZ float64
	// Gate switches sign-consistency gating on (default). Off: A_proc = z̃.
	Gate bool
	// EligibleKinds are the turn kinds that can be eligible. Default ["search"].
	EligibleKinds []string
	// NoAnswerEmptySegmentsEligible, when true, makes every turn of an
	// eligible kind eligible in a trajectory without an answer turn, even
	// with an empty assistant or environment segment (flag
	// --no-answer-empty-segments-eligible). Default false: the
	// non-empty-segments rule always applies (docs/method.md, "Eligibility").
	NoAnswerEmptySegmentsEligible bool

	// AttnSR (docs/method.md §3).

	// Rho is ρ ≥ 0, the backtracking decay. Default 0.9. With ρ = 0 no
	// backtracked mass reaches a non-terminal step and only the recency term
	// orders them.
	Rho float64
	// Eta is η, the weight of the recency term. Default 0.5.
	Eta float64
	// T is the softmax temperature. Default 1.0.
	T float64
	// Eps is ε of the log floors. Default 1e-8.
	Eps float64
	// MStar is m*, the focus mass that counts as full focus. Default 0.5.
	MStar float64
	// Beta is β, the step reward budget scale. Default 0.25.
	Beta float64
	// Alpha is α, the GRPO reweighting strength. Default 0.25.
	Alpha float64
	// Delta is δ, the EMA baseline decay. Default 0.99.
	Delta float64
	// Output is OutputGRPO (reweighted advantages) or OutputPPO (token rewards).
	Output vocab.Output
}

// DefaultConfig returns every default of docs/method.md: LAPO with λ = 0.5,
// ε_ig = ε_z = ε_R = 1e-6, gating on, eligible kinds {search}; AttnSR with
// ρ = 0.9, η = 0.5, T = 1, ε = 1e-8, m* = 0.5, β = 0.25, α = 0.25, δ = 0.99,
// GRPO output.
func DefaultConfig() Config {
	return Config{
		Method:        MethodLAPO,
		EpsR:          1e-6,
		Lambda:        0.5,
		EpsIG:         1e-6,
		EpsZ:          1e-6,
		Gate:          true,
		EligibleKinds: []string{KindSearch},
		Rho:           0.9,
		Eta:           0.5,
		T:             1.0,
		Eps:           1e-8,
		MStar:         0.5,
		Beta:          0.25,
		Alpha:         0.25,
		Delta:         0.99,
		Output:        OutputGRPO,
	}
}

// Validate reports the first setting that cannot give finite, meaningful
// numbers, naming the setting and the accepted range.
func (c Config) Validate() error {
	finite := func(name string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("credit: %s = %v is not a finite number", name, v)
		}
		return nil
	}
	nonNegative := func(name string, v float64) error {
		if err := finite(name, v); err != nil {
			return err
		}
		if v < 0 {
			return fmt.Errorf("credit: %s = %v must be >= 0", name, v)
		}
		return nil
	}
	positive := func(name string, v float64) error {
		if err := finite(name, v); err != nil {
			return err
		}
		if v <= 0 {
			return fmt.Errorf("credit: %s = %v must be > 0 (it keeps a division finite)", name, v)
		}
		return nil
	}
	unit := func(name string, v float64) error {
		if err := finite(name, v); err != nil {
			return err
		}
		if v < 0 || v > 1 {
			return fmt.Errorf("credit: %s = %v must lie in [0, 1]", name, v)
		}
		return nil
	}
	if err := checkMethod(c.Method); err != nil {
		return err
	}
	switch c.Output {
	case OutputGRPO, OutputPPO:
	default:
		return fmt.Errorf("credit: attnsr output %q is unknown; use %q or %q", c.Output, OutputGRPO, OutputPPO)
	}
	for _, chk := range []error{
		positive("eps_r", c.EpsR),
		finite("lambda", c.Lambda),
		positive("eps_ig", c.EpsIG),
		positive("eps_z", c.EpsZ),
		nonNegative("rho", c.Rho),
		finite("eta", c.Eta),
		positive("temperature", c.T),
		positive("eps", c.Eps),
		positive("m_star", c.MStar),
		finite("beta", c.Beta),
		unit("alpha", c.Alpha),
		unit("ema_delta", c.Delta),
	} {
		if chk != nil {
			return chk
		}
	}
	if c.Beta < 0 {
		return fmt.Errorf("credit: beta = %v must be >= 0", c.Beta)
	}
	for _, k := range c.EligibleKinds {
		if !KnownKind(k) {
			return fmt.Errorf("credit: eligible kind %q is unknown; use search, answer, tool or other", k)
		}
	}
	return nil
}

// KnownKind reports whether k is one of the docs/method.md, "Words" turn kinds.
func KnownKind(k string) bool {
	switch k {
	case KindSearch, KindAnswer, KindTool, KindOther:
		return true
	}
	return false
}
