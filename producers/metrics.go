package producers

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	records  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
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
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.records, err = register(reg, m.records); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same name so that several producers share their metrics.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
