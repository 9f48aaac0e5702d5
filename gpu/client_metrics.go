package gpu

// The Client's Prometheus metrics.

import (
	"github.com/prometheus/client_golang/prometheus"
)

// errorKinds are the kind label values of creditflow_scorer_errors_total.
var errorKinds = []string{"connection", "timeout", "server", "rejected", "status", "protocol"}

type clientMetrics struct {
	duration  *prometheus.HistogramVec
	fill      *prometheus.HistogramVec
	callers   *prometheus.HistogramVec
	requests  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	inFlight  *prometheus.GaugeVec
	healthy   *prometheus.GaugeVec
	forwarded prometheus.Counter
	rowByRow  prometheus.Counter
	truncs    prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_request_duration_seconds",
			Help:    "Duration of one scorer request attempt, by endpoint and op.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"endpoint", "op"}),
		fill: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_fill_ratio",
			Help:    "Tokens of a coalesced request divided by the token budget, by op.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		}, []string{"op"}),
		callers: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_callers",
			Help:    "Caller work items coalesced into one request, by op.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}, []string{"op"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_requests_total",
			Help: "Scorer request attempts, by endpoint and op.",
		}, []string{"endpoint", "op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_retries_total",
			Help: "Scorer requests retried after a failed attempt, by op.",
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_errors_total",
			Help: "Failed scorer request attempts, by endpoint, op and kind (connection, timeout, server, rejected, status, protocol).",
		}, []string{"endpoint", "op", "kind"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_in_flight_requests",
			Help: "Scorer requests in flight, by endpoint.",
		}, []string{"endpoint"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_endpoint_healthy",
			Help: "1 when the client sends work to the endpoint, 0 while it is probed after failures.",
		}, []string{"endpoint"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_forwarded_total",
			Help: "Tokens the scorers reported forwarding through the model (with prefix sharing).",
		}),
		rowByRow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_row_by_row_total",
			Help: "Tokens a row-by-row computation would have forwarded for the same rows.",
		}),
		truncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_truncations_total",
			Help: "Rows the scorers cut from the left to fit the model's max context.",
		}),
	}
	if reg != nil {
		m.duration = shared(reg, m.duration)
		m.fill = shared(reg, m.fill)
		m.callers = shared(reg, m.callers)
		m.requests = shared(reg, m.requests)
		m.retries = shared(reg, m.retries)
		m.errors = shared(reg, m.errors)
		m.inFlight = shared(reg, m.inFlight)
		m.healthy = shared(reg, m.healthy)
		m.forwarded = shared(reg, m.forwarded)
		m.rowByRow = shared(reg, m.rowByRow)
		m.truncs = shared(reg, m.truncs)
	}
	return m
}
