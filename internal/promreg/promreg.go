// Package promreg registers Prometheus collectors so that several clients
// in one process (producers, consumer groups, scorers) share their series,
// and reads gathered series back (Sum) for harnesses and tests.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Register registers c with reg, or returns the collector already
// registered under the same description. The error is any other
// registration failure (e.g. the same name with other labels).
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
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

// Sum adds up the series of metric name in mfs whose labels include want
// (nil: every series): counter and gauge values, histogram and summary
// sample counts. 0 when there is no such metric.
func Sum(mfs []*dto.MetricFamily, name string, want map[string]string) float64 {
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			case m.Summary != nil:
				sum += float64(m.Summary.GetSampleCount())
			}
		}
	}
	return sum
}
