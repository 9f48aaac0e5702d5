package stage

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/processors/credit"
)

// Metrics are the stages' Prometheus metrics. Create one per process and
// share it between the stages of that process.
type Metrics struct {
	reg            prometheus.Registerer // the stages' consumer groups register their metrics here too
	once           sync.Mutex
	registered     map[string]bool // kinds of method metrics registered (forMethod)
	recordsIn      *prometheus.CounterVec
	recordsOut     *prometheus.CounterVec
	deadLetters    *prometheus.CounterVec
	unwritable     *prometheus.CounterVec
	duplicates     prometheus.Counter
	groups         *prometheus.CounterVec
	groupWait      prometheus.Histogram
	latency        *prometheus.HistogramVec
	inflight       *prometheus.GaugeVec
	truncations    prometheus.Counter
	nonFiniteGains prometheus.Counter
	noGoldTarget   prometheus.Counter
	lapoDelta      *prometheus.CounterVec
	lapoGate       *prometheus.CounterVec
	lapoProcAbs    prometheus.Histogram
	attnConfidence prometheus.Histogram
	attnFocus      prometheus.Histogram
	attnConsensus  prometheus.Histogram
	attnBudget     prometheus.Histogram
	attnBaseline   *prometheus.GaugeVec
	stepRewards    *prometheus.CounterVec
	snapshots      prometheus.Counter
	resets         prometheus.Counter
	signals        *signalMetrics // reward and staleness signals (signals.go)
}

// NewMetrics registers the stage metrics with reg (nil: a private registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	unit := []float64{0, .05, .1, .2, .3, .4, .5, .6, .7, .8, .9, .95, 1}
	m := &Metrics{
		reg: reg,
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_records_in_total",
			Help: "Input records read by a stage."}, []string{"stage"}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_records_out_total",
			Help: "Records a stage wrote and the broker acknowledged, by topic."}, []string{"stage", "topic"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_dead_letters_total",
			Help: "Records sent to the dead-letter topic, by stage and reason."}, []string{"stage", "reason"}),
		unwritable: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_unwritable_records_total",
			Help: "Outputs the broker refused for good (not even a dead letter could be written); each is logged as an error."}, []string{"stage"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_duplicates_total",
			Help: "Scored records ignored because their trajectory_id was already in the group."}),
		groups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_groups_total",
			Help: "Groups closed, by outcome (complete, partial, incomplete)."}, []string{"outcome"}),
		groupWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_group_wait_seconds",
			Help: "Processing time from a group's first member read to the group closing.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "creditflow_stage_latency_seconds",
			Help: "Time from reading a record to its outputs being acknowledged.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"stage"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "creditflow_inflight_records",
			Help: "Input records read but not yet finished, by stage."}, []string{"stage"}),
		truncations: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_lapo_truncations_total",
			Help: "LAPO rows whose context was cut from the left to fit the scorer's context (docs/method.md §2.1)."}),
		nonFiniteGains: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_lapo_nonfinite_gains_total",
			Help: "Eligible turns whose LAPO gain Δ was not finite (a row score the scorer could not compute) and became 0."}),
		noGoldTarget: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_lapo_trajectories_without_gold_target_total",
			Help: "LAPO trajectories scored without a usable gold target (no target tokens, or an empty or whitespace-only first gold answer): no process scores, outcome advantage only."}),
		lapoDelta: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_lapo_delta_total",
			Help: "Eligible turns by the sign of their LAPO gain Δ."}, []string{"sign"}),
		lapoGate: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_lapo_gate_total",
			Help: "Eligible turns by gate result (pass: Δ and z̃ have the same strict sign)."}, []string{"result"}),
		lapoProcAbs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_lapo_process_advantage_abs",
			Help: "|A_proc| of eligible turns.", Buckets: []float64{0, .1, .25, .5, .75, 1, 1.5, 2, 3}}),
		attnConfidence: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_attnsr_confidence",
			Help: "AttnSR confidence C = F·Q per trajectory.", Buckets: unit}),
		attnFocus: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_attnsr_focus",
			Help: "AttnSR focus F per trajectory.", Buckets: unit}),
		attnConsensus: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_attnsr_consensus",
			Help: "AttnSR layer consensus Q per trajectory.", Buckets: unit}),
		attnBudget: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "creditflow_attnsr_budget",
			Help: "AttnSR centered budget B_i per trajectory.", Buckets: []float64{-.25, -.2, -.15, -.1, -.05, -.01, 0, .01, .05, .1, .15, .2, .25}}),
		attnBaseline: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "creditflow_attnsr_baseline",
			Help: "AttnSR EMA outcome baseline R̄_t, per input partition."}, []string{"partition"}),
		stepRewards: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "creditflow_attnsr_step_rewards_total",
			Help: "AttnSR intermediate step rewards by sign."}, []string{"sign"}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_state_snapshots_total",
			Help: "Partition state snapshots written to the changelog topic."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_state_missing_total",
			Help: "Partitions that started without a snapshot while their committed offset was past the start (EMA restarted)."}),
	}
	reg.MustRegister(m.recordsIn, m.recordsOut, m.deadLetters, m.unwritable, m.duplicates, m.groups, m.groupWait, m.latency,
		m.inflight, m.snapshots, m.resets)
	m.signals = newSignalMetrics(reg)
	return m
}

// forMethod registers the metrics of what a credit method does — LAPO's
// rows, AttnSR's step graphs and the EMA baseline — the first time a stage
// of such a method is created, so that a process exports only the series of
// the method it runs (no always-empty histograms of the other one).
func (m *Metrics) forMethod(method credit.Method) {
	m.once.Lock()
	defer m.once.Unlock()
	if m.registered == nil {
		m.registered = make(map[string]bool, 3)
	}
	register := func(kind string, cs ...prometheus.Collector) {
		if !m.registered[kind] {
			m.registered[kind] = true
			m.reg.MustRegister(cs...)
		}
	}
	switch method.Scoring {
	case credit.ScoreRows:
		register("rows", m.truncations, m.nonFiniteGains, m.noGoldTarget, m.lapoDelta, m.lapoGate, m.lapoProcAbs)
	case credit.ScoreAttention:
		register("attention", m.attnConfidence, m.attnFocus, m.attnConsensus, m.attnBudget, m.stepRewards)
	}
	if method.Baseline {
		register("baseline", m.attnBaseline)
	}
}
