package consumers

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/internal/promreg"
)

type metrics struct {
	records   *prometheus.CounterVec
	lag       *prometheus.GaugeVec
	committed *prometheus.GaugeVec
	rejoins   prometheus.Counter
	// rebalances counts generations this member joined, by group.
	rebalances *prometheus.CounterVec
	assigned   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_consumer_records_total",
			Help: "Records handed to claim handlers, by topic.",
		}, []string{"topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_consumer_lag_records",
			Help: "Records between the last delivered record and the partition's end, including records buffered for the handler.",
		}, []string{"topic", "partition"}),
		committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_consumer_committed_offset",
			Help: "Last offset committed by this member, by topic and partition.",
		}, []string{"topic", "partition"}),
		rejoins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_consumer_join_errors_total",
			Help: "Failed attempts to join the consumer group (retried).",
		}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_consumer_rebalances_total",
			Help: "Generations of the consumer group this member joined (each follows a rebalance), by group.",
		}, []string{"group"}),
		assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_consumer_assigned_partitions",
			Help: "Partitions assigned to this member in its current generation (0 between generations), by group.",
		}, []string{"group"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.records, err = promreg.Register(reg, m.records); err != nil {
		return nil, err
	}
	if m.lag, err = promreg.Register(reg, m.lag); err != nil {
		return nil, err
	}
	if m.committed, err = promreg.Register(reg, m.committed); err != nil {
		return nil, err
	}
	if m.rejoins, err = promreg.Register(reg, m.rejoins); err != nil {
		return nil, err
	}
	if m.rebalances, err = promreg.Register(reg, m.rebalances); err != nil {
		return nil, err
	}
	if m.assigned, err = promreg.Register(reg, m.assigned); err != nil {
		return nil, err
	}
	return m, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
