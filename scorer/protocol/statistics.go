package protocol

// Statistics (FeatureStatistics): the entropy and kl statistics of a set,
// and the reference contexts of kl rows (checked by scorer.CheckStatistics).

import "github.com/creditflow/creditflow/scorer"

// FeatureStatistics is the /v1/info feature of a server that answers a
// set's "statistic" (entropy or kl) and takes the rows' "reference"
// (docs/scorer-protocol.md, "Statistics").
const FeatureStatistics = scorer.FeatureStatistics

// wireStatistic is a set's statistic as it travels: absent for logprob, so
// that a logprob request is the bytes it was before the feature.
func wireStatistic(stat string) string {
	if scorer.IsLogProb(stat) {
		return ""
	}
	return stat
}
