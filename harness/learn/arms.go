package learn

// Arms: a comparison's arms are methods with the variants that set them
// apart. An arm is written METHOD[+VARIANT...]: lapo+forward (IGPO's
// direction), lapo+no-gate, lapo+label-noise, grpo+likelihood,
// grpo+gold-bonus, grpo+likelihood-bonus, ppo+oracle (PPO with the oracle's
// ±λ step rewards: the control of AttnSR's PPO setup), oracle+once and
// ppo+oracle+once (each label paid once), attnsr+uniform (AttnSR's step
// budget spread evenly over the moves: ρ = η = 0), attnsr+terminal (AttnSR's
// step rewards moved by the trainer onto the terminal token) (docs/learn.md,
// "Comparing methods"). A run's arm is read
// back from its recorded settings, so runs made with the flags
// (--direction forward, --reward likelihood, …) and runs made with the arm's
// name are the same arm.

import (
	"fmt"
	"strings"

	"github.com/creditflow/creditflow/vocab"
)

// Variants an arm can name, in the order Arm writes them.
const (
	VariantForward         = "forward"
	VariantNoGate          = "no-gate"
	VariantLikelihood      = RewardLikelihood
	VariantGoldBonus       = RewardGoldBonus
	VariantLikelihoodBonus = RewardLikelihoodBonus
	VariantLabelNoise      = "label-noise"
	VariantOracle          = MethodOracle
	VariantOnce            = "once"
	VariantUniform         = "uniform"
	VariantTerminal        = "terminal"
)

// WithArm is o with the method and variants of arm applied (the other
// options as they are), checked as a run would be.
func WithArm(o Options, arm string) (Options, error) {
	parts := strings.Split(arm, "+")
	o.Method = parts[0]
	for _, v := range parts[1:] {
		switch v {
		case VariantForward:
			o.Direction = string(vocab.Forward)
		case VariantNoGate:
			o.NoGate = true
		case VariantLabelNoise:
			o.LabelNoise = true
		case VariantLikelihood, VariantGoldBonus, VariantLikelihoodBonus:
			o.Reward = v
		case VariantOracle:
			o.OracleSteps = true
		case VariantOnce:
			o.OracleOnce = true
		case VariantUniform:
			o.AttnSRUniform = true
		case VariantTerminal:
			o.AttnSRTerminal = true
		default:
			return o, fmt.Errorf("arm %q: variant %q is none of forward, no-gate, label-noise, likelihood, gold-bonus, likelihood-bonus, oracle, once, uniform, terminal", arm, v)
		}
	}
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("arm %q: %w", arm, err)
	}
	return o, nil
}

// Arm is the run's arm: its method and the variants its settings record
// (the method alone for a run without settings).
func (s Summary) Arm() string {
	a := s.Method
	st := s.Settings
	if st == nil {
		return a
	}
	if st.Direction == string(vocab.Forward) {
		a += "+" + VariantForward
	}
	if st.NoGate {
		a += "+" + VariantNoGate
	}
	if st.Reward != "" && st.Reward != RewardJudge {
		a += "+" + st.Reward
	}
	if st.LabelNoise {
		a += "+" + VariantLabelNoise
	}
	if st.OracleSteps {
		a += "+" + VariantOracle
	}
	if st.OracleOnce {
		a += "+" + VariantOnce
	}
	if st.AttnSRUniform {
		a += "+" + VariantUniform
	}
	if st.AttnSRTerminal {
		a += "+" + VariantTerminal
	}
	return a
}
