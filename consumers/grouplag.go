package consumers

// Consumer-group lag from the brokers' data: the committed offsets of the
// group (OffsetFetch) against the partitions' end offsets (ListOffsets).
// Unlike creditflow_consumer_lag_records, which the fetcher of the member
// that holds a partition computes and which leaves with the partition,
// this lag exists while no member holds the partition: when consumers are
// dead or rebalancing (docs/stream.md, "Health").

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/promreg"
)

// PartitionLag is one partition's position for a group.
type PartitionLag struct {
	Partition int
	// Committed is the group's committed offset, -1 when it never
	// committed the partition.
	Committed int64
	// Start and End are the partition's first offset and end offset (the
	// offset of the next record written).
	Start, End int64
	// Lag is End - Committed, or End - Start without a commit (a group
	// that never committed starts at the earliest offset).
	Lag int64
}

// GroupLag returns, for each partition of topic, where groupID stands,
// from the brokers' committed and end offsets; it needs no member of the
// group to be running.
func GroupLag(ctx context.Context, brokers []string, sec kafkasec.Config, groupID, topic string) ([]PartitionLag, error) {
	tr, err := sec.Transport()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	defer tr.CloseIdleConnections()
	return groupLag(ctx, &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}, groupID, topic)
}

func groupLag(ctx context.Context, c *kafka.Client, groupID, topic string) ([]PartitionLag, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("consumers: metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("consumers: metadata of %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("consumers: topic %s has no partitions", topic)
	}
	sort.Ints(parts)
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("consumers: offsets of %s: %w", topic, err)
	}
	bounds := map[int]kafka.PartitionOffsets{}
	for _, po := range lo.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("consumers: offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		bounds[po.Partition] = po
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: groupID, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("consumers: committed offsets of group %s: %w", groupID, err)
	}
	committed := map[int]int64{}
	if of.Error != nil && !errors.Is(of.Error, kafka.GroupIdNotFound) {
		return nil, fmt.Errorf("consumers: committed offsets of group %s: %w", groupID, of.Error)
	}
	for _, p := range of.Topics[topic] {
		if p.Error == nil {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	out := make([]PartitionLag, 0, len(parts))
	for _, p := range parts {
		b := bounds[p]
		pl := PartitionLag{Partition: p, Committed: -1, Start: b.FirstOffset, End: b.LastOffset}
		if c, ok := committed[p]; ok && c >= 0 {
			pl.Committed = c
		}
		if pl.Committed >= 0 {
			pl.Lag = max(0, pl.End-pl.Committed)
		} else {
			pl.Lag = max(0, pl.End-pl.Start)
		}
		out = append(out, pl)
	}
	return out, nil
}

// LagExporter exports GroupLag of its groups as
// creditflow_consumer_group_lag_records{group,topic,partition} (and the
// group's committed offset and the partition's end offset), read from the
// brokers every interval. Series are never deleted when a partition
// moves; a partition that disappears from the topic keeps its last value
// until the process restarts.
type LagExporter struct {
	brokers  []string
	sec      kafkasec.Config
	interval time.Duration
	log      zerolog.Logger
	targets  [][2]string // group, topic
	lag      *prometheus.GaugeVec
	end      *prometheus.GaugeVec
	commit   *prometheus.GaugeVec
	errors   prometheus.Counter
}

// NewLagExporter registers the lag series with reg; Run reads them.
func NewLagExporter(brokers []string, sec kafkasec.Config, interval time.Duration, reg prometheus.Registerer, log zerolog.Logger) (*LagExporter, error) {
	if interval <= 0 {
		interval = 15 * time.Second
	}
	e := &LagExporter{brokers: brokers, sec: sec, interval: interval, log: log,
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "creditflow_consumer_group_lag_records",
			Help: "Records between the group's committed offset and the partition's end offset, read from the brokers (present while no member holds the partition)."},
			[]string{"group", "topic", "partition"}),
		end: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "creditflow_consumer_group_end_offset",
			Help: "The partition's end offset (next offset written), read from the brokers."}, []string{"group", "topic", "partition"}),
		commit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "creditflow_consumer_group_committed_offset",
			Help: "The group's committed offset of the partition, read from the brokers (-1: never committed)."}, []string{"group", "topic", "partition"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_consumer_group_lag_errors_total",
			Help: "Reads of the group lag from the brokers that failed (the series keep their last value)."}),
	}
	if reg != nil {
		var err error
		if e.lag, err = promreg.Register(reg, e.lag); err != nil {
			return nil, err
		}
		if e.end, err = promreg.Register(reg, e.end); err != nil {
			return nil, err
		}
		if e.commit, err = promreg.Register(reg, e.commit); err != nil {
			return nil, err
		}
		if e.errors, err = promreg.Register(reg, e.errors); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Watch adds groupID's lag on topic to the series read.
func (e *LagExporter) Watch(groupID, topic string) {
	e.targets = append(e.targets, [2]string{groupID, topic})
}

// Run reads the lag every interval until ctx ends; call Watch before.
func (e *LagExporter) Run(ctx context.Context) {
	tr, err := e.sec.Transport()
	if err != nil {
		e.log.Error().Err(err).Msg("group lag: no transport")
		return
	}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr, Timeout: 10 * time.Second}
	t := time.NewTicker(e.interval)
	defer t.Stop()
	for {
		e.Poll(ctx, c)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads the lag once (with c, or a client of its own when nil).
func (e *LagExporter) Poll(ctx context.Context, c *kafka.Client) {
	if c == nil {
		tr, err := e.sec.Transport()
		if err != nil {
			return
		}
		defer tr.CloseIdleConnections()
		c = &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr, Timeout: 10 * time.Second}
	}
	for _, tg := range e.targets {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lags, err := groupLag(pctx, c, tg[0], tg[1])
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				e.errors.Inc()
				e.log.Debug().Err(err).Str("group", tg[0]).Str("topic", tg[1]).Msg("group lag not read")
			}
			continue
		}
		for _, l := range lags {
			p := itoa(l.Partition)
			e.lag.WithLabelValues(tg[0], tg[1], p).Set(float64(l.Lag))
			e.end.WithLabelValues(tg[0], tg[1], p).Set(float64(l.End))
			e.commit.WithLabelValues(tg[0], tg[1], p).Set(float64(l.Committed))
		}
	}
}
