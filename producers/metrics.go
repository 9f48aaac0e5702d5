package producers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/internal/promreg"
)

type metrics struct {
	records  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
	chunked  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_producer_records_total",
			Help: "Records acknowledged by the brokers, by topic.",
		}, []string{"topic"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_producer_errors_total",
			Help: "Records that Produce gave up on (after retries), by topic.",
		}, []string{"topic"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "creditflow_producer_batch_duration_seconds",
			Help:    "Time from a Produce call to the acknowledgement of all its records.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		chunked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_producer_chunked_records_total",
			Help: "Records too large for one message, written as chunks, by topic.",
		}, []string{"topic"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.records, err = promreg.Register(reg, m.records); err != nil {
		return nil, err
	}
	if m.errors, err = promreg.Register(reg, m.errors); err != nil {
		return nil, err
	}
	if m.duration, err = promreg.Register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.chunked, err = promreg.Register(reg, m.chunked); err != nil {
		return nil, err
	}
	return m, nil
}
