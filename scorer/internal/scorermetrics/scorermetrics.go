// Package scorermetrics holds the Prometheus series of the scorer layer
// that more than one of its packages exports.
//
// Guarantees:
//   - Client is the one definition of the scorer client's series
//     (creditflow_scorer_*): the protocol client exports them, and the
//     in-process scorer exports the token and duration series under the same
//     names and help, so a processor's dashboard panels do not depend on
//     where it scores.
//   - Shared registers a collector so that several clients or scorers in
//     one process share their series instead of failing to register.
package scorermetrics

import (
	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrorKinds are the kind label values of creditflow_scorer_errors_total.
var ErrorKinds = []string{"connection", "timeout", "server", "rejected", "status", "protocol"}

// Client is the scorer client's series.
type Client struct {
	Duration    *prometheus.HistogramVec
	Fill        *prometheus.HistogramVec
	Callers     *prometheus.HistogramVec
	Requests    *prometheus.CounterVec
	Retries     *prometheus.CounterVec
	Errors      *prometheus.CounterVec
	InFlight    *prometheus.GaugeVec
	Healthy     *prometheus.GaugeVec
	Forwarded   prometheus.Counter
	RowByRow    prometheus.Counter
	Truncations prometheus.Counter
	// Packs and MaxPackTokens: the tree-packed model calls scorers report
	// (a pod under --packing tree); a scorer that does not pack adds nothing.
	Packs         prometheus.Counter
	MaxPackTokens prometheus.Histogram
}

// NewClient defines the client's series and, when reg is not nil, registers
// them with it (Shared).
func NewClient(reg prometheus.Registerer) *Client {
	m := &Client{
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_request_duration_seconds",
			Help:    "Duration of one scorer request attempt, by endpoint and op.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"endpoint", "op"}),
		Fill: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_fill_ratio",
			Help:    "Tokens of a coalesced request divided by the token budget, by op.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		}, []string{"op"}),
		Callers: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_callers",
			Help:    "Caller work items coalesced into one request, by op.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}, []string{"op"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_requests_total",
			Help: "Scorer request attempts, by endpoint and op.",
		}, []string{"endpoint", "op"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_retries_total",
			Help: "Scorer requests retried after a failed attempt, by op.",
		}, []string{"op"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_errors_total",
			Help: "Failed scorer request attempts, by endpoint, op and kind (connection, timeout, server, rejected, status, protocol).",
		}, []string{"endpoint", "op", "kind"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_in_flight_requests",
			Help: "Scorer requests in flight, by endpoint.",
		}, []string{"endpoint"}),
		Healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_endpoint_healthy",
			Help: "1 when the client sends work to the endpoint, 0 while it is probed after failures.",
		}, []string{"endpoint"}),
		Forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_forwarded_total",
			Help: "Tokens the scorers reported forwarding through the model (with prefix sharing).",
		}),
		RowByRow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_row_by_row_total",
			Help: "Tokens a row-by-row computation would have forwarded for the same rows.",
		}),
		Truncations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_truncations_total",
			Help: "Rows the scorers cut from the left to fit the model's max context.",
		}),
		Packs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_packs_total",
			Help: "Model calls of tree packing the scorers reported for score requests (0 from scorers that do not pack).",
		}),
		MaxPackTokens: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_max_pack_tokens",
			Help:    "Tokens of the largest tree pack of a packed score request, one observation per request.",
			Buckets: prometheus.ExponentialBuckets(64, 2, 12),
		}),
	}
	if reg != nil {
		m.Duration = Shared(reg, m.Duration)
		m.Fill = Shared(reg, m.Fill)
		m.Callers = Shared(reg, m.Callers)
		m.Requests = Shared(reg, m.Requests)
		m.Retries = Shared(reg, m.Retries)
		m.Errors = Shared(reg, m.Errors)
		m.InFlight = Shared(reg, m.InFlight)
		m.Healthy = Shared(reg, m.Healthy)
		m.Forwarded = Shared(reg, m.Forwarded)
		m.RowByRow = Shared(reg, m.RowByRow)
		m.Truncations = Shared(reg, m.Truncations)
		m.Packs = Shared(reg, m.Packs)
		m.MaxPackTokens = Shared(reg, m.MaxPackTokens)
	}
	return m
}

// Shared registers c with reg, or returns the collector already registered
// under the same description, so that several scorers or clients in one
// process share their series. A conflicting registration keeps c
// unregistered.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	got, _ := promreg.Register(reg, c)
	return got
}
