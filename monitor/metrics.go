package monitor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes the aggregates on /metrics, read at scrape time. The only
// label is the samples topic (the few given on the command line) or the
// dead-letter reason (a bounded set of codes); never a policy version.
type collector struct {
	agg                                             *Aggregator
	samples, duplicates, undecodable, successes     *prometheus.Desc
	groups, zeroVar, passGroups, rewardMean, newest *prometheus.Desc
	dead                                            *prometheus.Desc
}

func newCollector(agg *Aggregator) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("creditflow_monitor_"+name, help, labels, nil)
	}
	return &collector{agg: agg,
		samples:     d("samples_total", "Samples counted (duplicates once).", "topic"),
		duplicates:  d("duplicate_samples_total", "Samples whose trajectory_id was already counted.", "topic"),
		undecodable: d("undecodable_records_total", "Records of a samples topic that are not a decodable Sample.", "topic"),
		successes:   d("successes_total", "Samples with reward at or above the success threshold.", "topic"),
		groups:      d("groups_total", "Groups closed.", "topic"),
		zeroVar:     d("zero_variance_groups_total", "Groups closed with every member's reward equal.", "topic"),
		passGroups:  d("pass_groups_total", "Groups closed with at least one success.", "topic"),
		rewardMean:  d("reward_mean", "Mean outcome reward of the samples counted.", "topic"),
		newest:      d("newest_policy_version", "Highest policy version seen.", "topic"),
		dead:        d("dead_letters_total", "Dead letters read, by reason.", "reason"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.samples, c.duplicates, c.undecodable, c.successes, c.groups, c.zeroVar, c.passGroups, c.rewardMean, c.newest, c.dead} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.agg.Summary()
	for name, t := range s.Topics {
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		counter(c.samples, t.Samples)
		counter(c.duplicates, t.Duplicates)
		counter(c.undecodable, t.Undecodable)
		counter(c.successes, t.Successes)
		counter(c.groups, t.Groups)
		counter(c.zeroVar, t.ZeroVarianceGroups)
		counter(c.passGroups, t.PassGroups)
		ch <- prometheus.MustNewConstMetric(c.rewardMean, prometheus.GaugeValue, t.RewardMean, name)
		if t.NewestPolicyVersion != nil {
			ch <- prometheus.MustNewConstMetric(c.newest, prometheus.GaugeValue, float64(*t.NewestPolicyVersion), name)
		}
	}
	for reason, n := range s.DeadLetters {
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.CounterValue, float64(n), reason)
	}
}
