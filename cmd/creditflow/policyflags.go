package main

import (
	"github.com/creditflow/creditflow/processors/stage"
)

// policyFlags defines the policy-version flags of the advantage stage
// (docs/stream.md, "Policy versions") on cfg.
func policyFlags(fs *flagSet, cfg *stage.Config) {
	fs.inGroup(groupPolicy, func() { policyFlagDefs(fs, cfg) })
}

func policyFlagDefs(fs *flagSet, cfg *stage.Config) {
	fs.StringVar(&cfg.Topics.Policy, "topic-policy", cfg.Topics.Policy, "compacted topic of policy announcements the advantage stage follows (empty: do not follow)")
	fs.StringVar(&cfg.Topics.SamplesStale, "topic-samples-stale", cfg.Topics.SamplesStale, "where samples more than --max-policy-lag versions behind go")
	fs.Int64Var(&cfg.MaxPolicyLag, "max-policy-lag", cfg.MaxPolicyLag, "route samples more than N versions behind the newest announced version to --topic-samples-stale (-1: off)")
	fs.Float64Var(&cfg.SuccessThreshold, "success-threshold", cfg.SuccessThreshold, "a reward at or above this counts as a success in the metrics")
}
