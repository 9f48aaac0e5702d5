// Package vocab is creditflow's vocabulary: the names of the credit methods,
// of LAPO's scoring directions and statistics, and of AttnSR's output forms,
// exactly as they appear in flags, configuration, records, metric labels and
// the docs (docs/method.md). It is a leaf: it imports nothing of the project,
// and every layer may import it.
//
// Guarantees:
//   - Every name here is the one written on the wire and in the docs; the
//     records carry them as plain strings (schemas), so a name never changes.
//   - The sets of directions, statistics and outputs are closed (Parse…
//     rejects anything else). The set of methods is open: a method is a name
//     that processors/credit.Register was given; LAPO and AttnSR are the two
//     built in.
package vocab

import (
	"fmt"
	"strings"
)

// Method names a credit method (docs/method.md §2, §3).
type Method string

// The built-in credit methods.
const (
	LAPO   Method = "lapo"   // leave-one-turn counterfactual answer likelihood (§2)
	AttnSR Method = "attnsr" // step rewards from the policy's attention (§3)
)

// Direction is how LAPO measures a turn's contribution (docs/method.md §2.1).
type Direction string

// LAPO's directions.
const (
	Backward Direction = "backward" // Δ_t = S(c_full) − S(c_−t): leave the turn out
	Forward  Direction = "forward"  // Δ_t = S(c_≤t) − S(c_<t): add the turn (IGPO's direction)
)

// Directions lists every direction, in the order the docs give them.
var Directions = []Direction{Backward, Forward}

// ParseDirection returns the Direction named s.
func ParseDirection(s string) (Direction, error) {
	for _, d := range Directions {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("direction %q is unknown; use %s", s, join(Directions))
}

// Statistic is what LAPO measures of the gold span (docs/method.md §2.4).
type Statistic string

// LAPO's statistics.
const (
	LogProb Statistic = "logprob" // S, the mean log-probability of the gold span (the default)
	Entropy Statistic = "entropy" // H, the mean predictive entropy over the gold span
	KL      Statistic = "kl"      // the mean KL(p(·|with) ‖ p(·|without)) over the gold span
)

// Statistics lists every statistic, the default first.
var Statistics = []Statistic{LogProb, Entropy, KL}

// ParseStatistic returns the Statistic named s; "" is the default, LogProb.
func ParseStatistic(s string) (Statistic, error) {
	if s == "" {
		return LogProb, nil
	}
	for _, st := range Statistics {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("statistic %q is unknown; use %s", s, join(Statistics))
}

// Output is the form of AttnSR's result (docs/method.md §3.3).
type Output string

// AttnSR's outputs.
const (
	OutputGRPO Output = "grpo" // per-token advantages: the outcome advantage reweighted by step credit
	OutputPPO  Output = "ppo"  // per-token rewards for a critic and GAE, the EMA-centred step rewards included
)

// Outputs lists every output, the default first.
var Outputs = []Output{OutputGRPO, OutputPPO}

// ParseOutput returns the Output named s.
func ParseOutput(s string) (Output, error) {
	for _, o := range Outputs {
		if string(o) == s {
			return o, nil
		}
	}
	return "", fmt.Errorf("attnsr output %q is unknown; use %s", s, join(Outputs))
}

func join[T ~string](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, " or ")
}
