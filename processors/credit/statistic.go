package credit

import (
	"fmt"

	"github.com/creditflow/creditflow/vocab"
)

// docs/method.md §2.4: the statistic a LAPO gain is measured with. The
// score stage asks the scorer for one number per row and forms Δ_t from
// them with Gain; everything after Δ (§2.2) is the same for every statistic.

// LAPO statistics (docs/method.md §2.4).
const (
	StatLogProb = vocab.LogProb // S, the mean log-probability of the gold span (the default)
	StatEntropy = vocab.Entropy // H, the mean predictive entropy over the gold span
	StatKL      = vocab.KL      // the mean KL(p(·|with) ‖ p(·|without)) over the gold span
)

// CheckStatistic reports a LAPO statistic that is not one of the three.
func CheckStatistic(stat vocab.Statistic) error {
	switch stat {
	case StatLogProb, StatEntropy, StatKL:
		return nil
	}
	return fmt.Errorf("LAPO statistic %q: use logprob, entropy or kl", stat)
}

// Gain is Δ_t of docs/method.md §2.4 from the scorer's row values:
//
//	logprob (2.4a): Δ_t = S(with) − S(without)
//	entropy (2.4b): Δ_t = H(without) − H(with)
//	kl      (2.4c): Δ_t = KL(p(·|with) ‖ p(·|without)), one row whose value is with
//
// where "with" is c_full (backward) or c_≤t (forward) and "without" c_−t or
// c_<t. For kl, without is not used (the row's value already compares the
// two contexts). A non-finite result is returned as it is: FiniteGain
// decides what it becomes.
func Gain(stat vocab.Statistic, with, without float64) float64 {
	switch stat {
	case StatEntropy:
		return without - with
	case StatKL:
		return with
	default:
		return with - without
	}
}
