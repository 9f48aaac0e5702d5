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

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"stage", "topic"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds"})
	reg.MustRegister(c, h)
	c.WithLabelValues("score", "a").Add(2)
	c.WithLabelValues("score", "b").Add(3)
	c.WithLabelValues("advantage", "a").Add(5)
	h.Observe(1)
	h.Observe(2)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want map[string]string
		sum  float64
	}{
		{"c_total", nil, 10},
		{"c_total", map[string]string{"stage": "score"}, 5},
		{"c_total", map[string]string{"stage": "score", "topic": "b"}, 3},
		{"c_total", map[string]string{"stage": "none"}, 0},
		{"h_seconds", nil, 2},
		{"absent", nil, 0},
	} {
		if got := Sum(mfs, tc.name, tc.want); got != tc.sum {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.want, got, tc.sum)
		}
	}
}
