package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterSharesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "creditflow_test_total", Help: "test"}
	a, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	a.Inc()
	b.Inc()
	if a != b {
		t.Fatal("the second registration got its own counter")
	}
	if _, err := Register(reg, prometheus.NewCounterVec(opts, []string{"x"})); err == nil {
		t.Fatal("same name with other labels accepted")
	}
}
