package stage

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// signalMetrics are the reward and staleness signals of the advantage stage
// (docs/stream.md, "Metrics"): what an RL run's trainer logs per step, live
// from the stream. Labels are bounded: never a policy version or prompt id.
type signalMetrics struct {
	reward      prometheus.Histogram
	successes   prometheus.Counter
	zeroVar     prometheus.Counter
	withSuccess prometheus.Counter
	tokens      prometheus.Histogram
	turns       prometheus.Histogram
	newest      prometheus.Gauge
	announced   prometheus.Gauge
	invalid     prometheus.Counter
	lag         prometheus.Histogram
	age         prometheus.Histogram
	scorerLag   prometheus.Histogram
	stale       prometheus.Counter
}

func newSignalMetrics(reg prometheus.Registerer) *signalMetrics {
	versions := []float64{0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64}
	announced, invalid := policy.NewMetrics()
	m := &signalMetrics{
		reward: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_outcome_reward",
			Help: "Outcome reward R_i of each emitted sample.", Buckets: []float64{-1, -.5, 0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1, 2}}),
		successes: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_successes_total",
			Help: "Emitted samples whose reward reached the success threshold (--success-threshold)."}),
		zeroVar: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_zero_variance_groups_total",
			Help: "Groups closed with every member's reward equal (no outcome signal for GRPO)."}),
		withSuccess: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_groups_with_success_total",
			Help: "Groups closed with at least one success (pass@G numerator; denominator creditflow_groups_total{outcome!=\"incomplete\"})."}),
		tokens: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_trajectory_tokens",
			Help: "Tokens per emitted trajectory (prompt, actions and observations).", Buckets: prometheus.ExponentialBuckets(64, 2, 11)}),
		turns: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_trajectory_turns",
			Help: "Turns per emitted trajectory.", Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64}}),
		newest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "creditflow_policy_version_newest",
			Help: "Newest policy version seen: the maximum of the announced version and every emitted trajectory's version; -1 before any."}),
		announced: announced,
		invalid:   invalid,
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_policy_lag_versions",
			Help: "Policy lag at emit: newest policy version seen minus the trajectory's policy_version.", Buckets: versions}),
		age: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_sample_age_seconds",
			Help: "Sample age at emit: wall clock minus the trajectory's created_at_ms.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14)}),
		scorerLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_scorer_policy_lag_versions",
			Help: "Scorer version lag: the scorer's policy version minus the trajectory's policy_version.", Buckets: []float64{-16, -8, -4, -2, -1, 0, 1, 2, 4, 8, 16}}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_stale_samples_total",
			Help: "Samples routed to the stale-samples topic because they were more than --max-policy-lag versions behind the newest announced version."}),
	}
	m.newest.Set(-1)
	reg.MustRegister(m.reward, m.successes, m.zeroVar, m.withSuccess, m.tokens, m.turns, m.newest, m.announced,
		m.invalid, m.lag, m.age, m.scorerLag, m.stale)
	return m
}

// versionSeen is the newest trajectory policy version the process emitted.
type versionSeen struct{ v atomic.Int64 }

func (s *versionSeen) observe(v int64) int64 {
	for {
		cur := s.v.Load()
		if v <= cur {
			return cur
		}
		if s.v.CompareAndSwap(cur, v) {
			return v
		}
	}
}

// signals feeds the reward and staleness metrics for one finalized group.
// members[i] produced results[i]; announced is the newest announced version
// the group was routed against (-1: none).
func (a *AdvantageStage) signals(members []*schemas.Scored, results []credit.Result, announced int64) {
	m := a.cfg.Metrics.signals
	now := time.Now().UnixMilli()
	newest := announced
	for _, s := range members {
		newest = max(newest, a.seen.observe(s.Trajectory.PolicyVersion))
	}
	m.newest.Set(float64(newest))
	if announced >= 0 { // also when the caller runs the follower (Config.Policy)
		m.announced.Set(float64(announced))
	}
	successes := 0
	for i, r := range results {
		t := &members[i].Trajectory
		m.reward.Observe(r.Reward)
		if r.Reward >= a.cfg.SuccessThreshold {
			successes++
			m.successes.Inc()
		}
		n := len(t.Prompt)
		for _, tu := range t.Turns {
			n += len(tu.Action) + len(tu.Observation)
		}
		m.tokens.Observe(float64(n))
		m.turns.Observe(float64(len(t.Turns)))
		m.lag.Observe(float64(newest - t.PolicyVersion))
		m.age.Observe(max(0, float64(now-t.CreatedAtMs)/1000))
		if v := members[i].ScorerPolicyVersion; v >= 0 { // -1: the scorer does not know its weights' version
			m.scorerLag.Observe(float64(v - t.PolicyVersion))
		}
	}
	if len(results) > 0 {
		lo, hi := results[0].Reward, results[0].Reward
		for _, r := range results[1:] {
			lo, hi = min(lo, r.Reward), max(hi, r.Reward)
		}
		if lo == hi {
			m.zeroVar.Inc()
		}
	}
	if successes > 0 {
		m.withSuccess.Inc()
	}
}

// observe feeds the process-signal metrics. The labelled counters are
// tallied over the record's turns first and looked up once per label (a
// lookup per turn was 4% of the AttnSR advantage stage's CPU at K = 30).
func (p *partition) observe(r credit.Result) {
	m := p.a.cfg.Metrics
	var delta, step [3]int // positive, negative, zero
	var gate [2]int        // pass, fail
	sign := func(x float64) int {
		switch {
		case x > 0:
			return 0
		case x < 0:
			return 1
		}
		return 2
	}
	for _, t := range r.Turns {
		if t.Eligible && t.Delta != nil {
			delta[sign(*t.Delta)]++
			if t.Gate == 1 {
				gate[0]++
			} else {
				gate[1]++
			}
			pa := t.ProcessAdvantage
			if pa < 0 {
				pa = -pa
			}
			m.lapoProcAbs.Observe(pa)
		}
		if t.StepReward != nil {
			step[sign(*t.StepReward)]++
		}
	}
	signs := [3]string{"positive", "negative", "zero"}
	for i, n := range delta {
		if n > 0 {
			m.lapoDelta.WithLabelValues(signs[i]).Add(float64(n))
		}
		if n := step[i]; n > 0 {
			m.stepRewards.WithLabelValues(signs[i]).Add(float64(n))
		}
	}
	for i, n := range gate {
		if n > 0 {
			m.lapoGate.WithLabelValues([2]string{"pass", "fail"}[i]).Add(float64(n))
		}
	}
	if s := r.AttnSR; s != nil {
		m.attnConfidence.Observe(s.Confidence)
		m.attnFocus.Observe(s.Focus)
		m.attnConsensus.Observe(s.Consensus)
		m.attnBudget.Observe(s.Budget)
	}
}
