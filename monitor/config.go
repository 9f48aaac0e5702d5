package monitor

import (
	"fmt"
	"time"
)

// Config sets what the aggregation counts and how much it remembers. Every
// bound is fixed at start: memory does not grow with the length of a run.
type Config struct {
	// SuccessThreshold: a sample with reward >= it is a success (default
	// 1.0; for F1 rewards, an exact match).
	SuccessThreshold float64
	// DedupeWindow is how many trajectory ids per topic are remembered to
	// count a duplicate once (default 131072).
	DedupeWindow int
	// MaxVersions is how many policy-version rows are kept per topic, the
	// newest ones (default 64).
	MaxVersions int
	// MaxSources is how many source rows are kept per topic (default 32):
	// the first MaxSources−1 sources seen get their own, later ones share
	// "other".
	MaxSources int
	// MaxOpenGroups bounds the groups per topic waiting for members (default
	// 16384); beyond it the oldest closes as incomplete.
	MaxOpenGroups int
	// GroupIdle: a partial group closes after this much wall time without a
	// new member (default 10s).
	GroupIdle time.Duration
	// RewardMin and RewardMax are the range of the reward histogram
	// (default 0 and 1; values outside are counted as under/over).
	RewardMin, RewardMax float64
	// RateSeconds is the window of the samples/s chart (default 300).
	RateSeconds int
	// KeepSamples is how many samples per topic each list of GET
	// /api/v1/samples keeps (the most recent; the best and the worst by
	// reward and by process credit), as locations and headline numbers
	// (default 256).
	KeepSamples int
	// KeepIDs is how many trajectory ids per topic are remembered with their
	// record's location for lookups (default 131072); an older id is found
	// by reading its key's partition again.
	KeepIDs int
}

// DefaultConfig is the configuration the command starts from.
func DefaultConfig() Config {
	return Config{SuccessThreshold: 1.0, DedupeWindow: 1 << 17, MaxVersions: 64, MaxSources: 32, MaxOpenGroups: 1 << 14,
		GroupIdle: 10 * time.Second, RewardMin: 0, RewardMax: 1, RateSeconds: 300,
		KeepSamples: 256, KeepIDs: 1 << 17}
}

// Check reports a configuration that cannot work, saying what to change.
func (c *Config) Check() error {
	switch {
	case c.DedupeWindow <= 0:
		return fmt.Errorf("monitor: dedupe window %d: set a positive number of trajectory ids", c.DedupeWindow)
	case c.MaxVersions <= 0:
		return fmt.Errorf("monitor: max versions %d: set a positive number of rows", c.MaxVersions)
	case c.MaxSources <= 0:
		return fmt.Errorf("monitor: max sources %d: set a positive number of rows", c.MaxSources)
	case c.MaxOpenGroups <= 0:
		return fmt.Errorf("monitor: max open groups %d: set a positive number", c.MaxOpenGroups)
	case !(c.RewardMax > c.RewardMin):
		return fmt.Errorf("monitor: reward range [%v, %v): the maximum must be above the minimum", c.RewardMin, c.RewardMax)
	case c.KeepSamples <= 0:
		return fmt.Errorf("monitor: keep samples %d: set a positive number of samples", c.KeepSamples)
	case c.KeepIDs <= 0:
		return fmt.Errorf("monitor: keep ids %d: set a positive number of trajectory ids", c.KeepIDs)
	case c.RateSeconds < 2:
		return fmt.Errorf("monitor: rate window %d s: use at least 2", c.RateSeconds)
	}
	return nil
}
