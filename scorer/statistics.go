package scorer

// Row statistics: what a scorer answers for a LAPO row (docs/method.md
// §2.4, docs/scorer-protocol.md "Statistics").

import (
	"fmt"
	"slices"

	"github.com/creditflow/creditflow/scorer/cpumodel"
)

// The statistics a row set can ask for (RowSet.Statistic).
const (
	// StatLogProb is S, the mean log-probability of the gold span (the
	// default: an empty RowSet.Statistic means it).
	StatLogProb = cpumodel.StatLogProb
	// StatEntropy is the mean entropy of the distributions that predict
	// the gold span.
	StatEntropy = cpumodel.StatEntropy
	// StatKL is the mean KL(p(·|Context) ‖ p(·|ReferenceContext)) over
	// the gold span; every row of such a set carries a ReferenceContext.
	StatKL = cpumodel.StatKL
)

// FeatureStatistics is the ModelInfo feature of a scorer that answers the
// entropy and kl statistics (protocol.FeatureStatistics on the wire). A
// scorer without it answers only log-probabilities.
const FeatureStatistics = "statistics"

// IsLogProb reports whether stat names the default statistic ("" or
// StatLogProb).
func IsLogProb(stat string) bool { return stat == "" || stat == StatLogProb }

// CheckStatistic reports a statistic that is none of "", logprob, entropy
// and kl, saying what to use.
func CheckStatistic(stat string) error {
	if stat == "" {
		return nil
	}
	return cpumodel.CheckStatistic(stat)
}

// HasFeature reports whether the scorer advertises feature f.
func (a ModelInfo) HasFeature(f string) bool { return slices.Contains(a.Features, f) }

// checkSetStatistic checks a set's statistic against its rows: a known
// statistic, a reference context on every kl row and on no other row.
func checkSetStatistic(s *RowSet) error {
	if err := CheckStatistic(s.Statistic); err != nil {
		return err
	}
	for j, r := range s.Rows {
		switch {
		case s.Statistic == StatKL && len(r.ReferenceContext) == 0:
			return fmt.Errorf("row %d has no reference context, which the kl statistic needs", j)
		case s.Statistic != StatKL && r.ReferenceContext != nil:
			return fmt.Errorf("row %d carries a reference context, which only the kl statistic takes", j)
		}
	}
	return nil
}

// CheckStatistics checks every set's statistic and reference contexts
// (see RowSet.Statistic); the error is a *RejectedError naming the set.
func CheckStatistics(sets []RowSet) error {
	for i := range sets {
		if err := checkSetStatistic(&sets[i]); err != nil {
			return Reject(i, sets[i].ID, "set %d: %v", i, err)
		}
	}
	return nil
}
