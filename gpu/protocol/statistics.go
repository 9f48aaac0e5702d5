package protocol

// Statistics (FeatureStatistics): the entropy and kl statistics of a set,
// and the reference contexts of kl rows.

import "github.com/creditflow/creditflow/gpu"

// FeatureStatistics is the /v1/info feature of a server that answers a
// set's "statistic" (entropy or kl) and takes the rows' "reference"
// (docs/scorer-protocol.md, "Statistics").
const FeatureStatistics = gpu.FeatureStatistics

// wireStatistic is a set's statistic as it travels: absent for logprob, so
// that a logprob request is the bytes it was before the feature.
func wireStatistic(stat string) string {
	if gpu.IsLogProb(stat) {
		return ""
	}
	return stat
}

// ValidateStatistics rejects (400) a set whose statistic is not logprob,
// entropy or kl, a kl row without a reference, and a reference on a row of
// any other statistic.
func ValidateStatistics(req ScoreRequest) error {
	for i, s := range req.Sets {
		if err := gpu.CheckStatistic(s.Statistic); err != nil {
			return gpu.Reject(i, s.ID, "set %d: %v", i, err)
		}
		for j, r := range s.Rows {
			switch {
			case s.Statistic == gpu.StatKL && len(r.Reference) == 0:
				return gpu.Reject(i, s.ID, "set %d row %d: the kl statistic needs a \"reference\" context on every row", i, j)
			case s.Statistic != gpu.StatKL && r.Reference != nil:
				return gpu.Reject(i, s.ID, "set %d row %d: \"reference\" is only taken by the kl statistic (set %q)", i, j, s.Statistic)
			}
		}
	}
	return nil
}
