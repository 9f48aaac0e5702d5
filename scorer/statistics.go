package scorer

// Row statistics: what a scorer answers for a LAPO row (docs/method.md
// §2.4, docs/scorer-protocol.md "Statistics").

import (
	"fmt"
	"slices"

	"github.com/creditflow/creditflow/vocab"
)

// The statistics a row set can ask for (RowSet.Statistic): how a scorer
// measures the gold span under a context (docs/offline.md). StatLogProb is
// S of docs/method.md §2.1; the others are the LAPO authors' alternatives.
const (
	// StatLogProb is S, the mean log p(target[k] | context, target[:k])
	// over the gold span [a, b) (the default: an empty RowSet.Statistic
	// means it).
	StatLogProb = string(vocab.LogProb)
	// StatEntropy is the mean entropy (nats) of the distributions that
	// predict the gold span: −Σ_v p(v) log p(v) with p = p(· | context,
	// target[:k]).
	StatEntropy = string(vocab.Entropy)
	// StatKL is the mean over the same positions of KL(p(·|Context,
	// target[:k]) ‖ p(·|ReferenceContext, target[:k])); every row of such a
	// set carries a ReferenceContext.
	StatKL = string(vocab.KL)
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
	switch stat {
	case "", StatLogProb, StatEntropy, StatKL:
		return nil
	}
	return fmt.Errorf("statistic %q: use logprob, entropy or kl", stat)
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
