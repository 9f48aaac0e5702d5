package consumers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/promreg"
)

// gauge sums the series of name with labels want in reg, and counts them.
func gauge(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (sum float64, series int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			series++
		}
	}
	return promreg.Sum(mfs, name, want), series
}

// TestGroupHealthRebalancesAndCommittedSeries: Health reports the member
// out of a generation before Run, then joined with its partitions;
// records the handler does not take are listed as waiting, records it
// took and did not commit as uncommitted, each with their count and age,
// and they leave the lists once taken and committed. A rebalance counts in
// creditflow_consumer_rebalances_total, moves creditflow_consumer_assigned_partitions,
// and deletes the committed-offset series of the partition that moved.
func TestGroupHealthRebalancesAndCommittedSeries(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(2, "h"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "h", 8, 0, 40)

	regA := prometheus.NewRegistry()
	a, err := consumers.NewGroup(groupCfg(brokers, "hg", "h"), consumers.WithRegisterer(regA))
	if err != nil {
		t.Fatal(err)
	}
	if h := a.Health(); h.Joined || len(h.Partitions) != 0 {
		t.Fatalf("before Run: %+v", h)
	}
	var allow, read atomic.Bool
	handler := func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
		next, last := cl.StartOffset, cl.StartOffset
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			records := cl.Records
			if !read.Load() {
				records = nil // not taking records yet
			}
			select {
			case r, ok := <-records:
				if !ok {
					return nil
				}
				next = r.Offset + 1
			case <-tick.C:
				if allow.Load() && next > last && commit(ctx, next) == nil {
					last = next
				}
			case <-ctx.Done():
				return nil
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	doneA := make(chan struct{})
	go func() { defer close(doneA); _ = a.Run(ctx, handler) }()

	waitFor(t, 20*time.Second, "member A joined with both partitions", func() bool {
		h := a.Health()
		return h.Joined && len(h.Partitions) == 2
	})
	if n, _ := gauge(t, regA, "creditflow_consumer_rebalances_total", map[string]string{"group": "hg"}); n != 1 {
		t.Errorf("rebalances after the first join: %v, want 1", n)
	}
	if n, _ := gauge(t, regA, "creditflow_consumer_assigned_partitions", map[string]string{"group": "hg"}); n != 2 {
		t.Errorf("assigned partitions: %v, want 2", n)
	}
	sum := func(stalls []consumers.Stall) (n int64) {
		for _, s := range stalls {
			n += s.Records
		}
		return n
	}
	// The handler takes nothing: the records wait for it.
	waitFor(t, 10*time.Second, "40 records waiting for the handler", func() bool { return sum(a.Health().Waiting) == 40 })
	time.Sleep(300 * time.Millisecond)
	if s, ok := consumers.Oldest(a.Health().Waiting); !ok || s.For < 300*time.Millisecond {
		t.Fatalf("oldest wait %+v (%v), want at least 300ms", s, ok)
	}
	// It takes them and commits nothing: they are uncommitted.
	read.Store(true)
	waitFor(t, 10*time.Second, "40 records taken and uncommitted", func() bool {
		h := a.Health()
		return len(h.Waiting) == 0 && sum(h.Uncommitted) == 40
	})
	time.Sleep(300 * time.Millisecond)
	if s, ok := consumers.Oldest(a.Health().Uncommitted); !ok || s.For < 300*time.Millisecond {
		t.Fatalf("oldest uncommitted %+v (%v), want at least 300ms", s, ok)
	}
	if !a.Health().LastCommit.IsZero() {
		t.Fatal("a commit reported before any was made")
	}
	allow.Store(true)
	waitFor(t, 10*time.Second, "nothing pending after the commits", func() bool {
		h := a.Health()
		return len(h.Uncommitted) == 0 && !h.LastCommit.IsZero()
	})
	if _, n := gauge(t, regA, "creditflow_consumer_committed_offset", nil); n != 2 {
		t.Fatalf("committed offset series: %d, want 2", n)
	}

	// A second member: one partition moves to it.
	regB := prometheus.NewRegistry()
	bg, err := consumers.NewGroup(groupCfg(brokers, "hg", "h"), consumers.WithRegisterer(regB))
	if err != nil {
		t.Fatal(err)
	}
	doneB := make(chan struct{})
	go func() { defer close(doneB); _ = bg.Run(ctx, newCollector().handler(true)) }()
	// (member A's handler reads and commits from here on)
	waitFor(t, 30*time.Second, "the partitions split between the two members", func() bool {
		ha, hb := a.Health(), bg.Health()
		return ha.Joined && hb.Joined && len(ha.Partitions) == 1 && len(hb.Partitions) == 1
	})
	if n, _ := gauge(t, regA, "creditflow_consumer_rebalances_total", map[string]string{"group": "hg"}); n < 2 {
		t.Errorf("rebalances after the second member joined: %v, want at least 2", n)
	}
	if n, _ := gauge(t, regA, "creditflow_consumer_assigned_partitions", map[string]string{"group": "hg"}); n != 1 {
		t.Errorf("assigned partitions after the rebalance: %v, want 1", n)
	}
	moved := bg.Health().Partitions[0] // "h/<n>"
	if _, n := gauge(t, regA, "creditflow_consumer_committed_offset", map[string]string{"topic": "h", "partition": moved[len("h/"):]}); n != 0 {
		t.Errorf("member A still exports the committed offset of %s, which moved to member B", moved)
	}
	cancel()
	<-doneA
	<-doneB
}

// TestGroupLagFromBrokers: the lag exporter reads the committed and end
// offsets from the brokers, so a group whose members are all gone still
// has its lag, per partition; a group that never committed lags by the
// whole partition.
func TestGroupLagFromBrokers(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(2, "lag"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "lag", 8, 0, 30)
	g, err := consumers.NewGroup(groupCfg(brokers, "lg", "lag"))
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx, col.handler(true)) }()
	waitFor(t, 20*time.Second, "30 records consumed", func() bool { return col.count.Load() >= 30 })
	waitFor(t, 10*time.Second, "all committed", func() bool {
		c := committed(t, brokers, "lg", "lag", 2)
		e := endOffsets(t, brokers, "lag")
		return c[0] == e[0] && c[1] == e[1]
	})
	cancel()
	<-done // no member of the group is left
	produceSeq(t, p, "lag", 8, 30, 10)

	reg := prometheus.NewRegistry()
	e, err := consumers.NewLagExporter(brokers, kafkasec.Config{}, time.Second, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	e.Watch("lg", "lag")
	e.Watch("never", "lag")
	e.Poll(context.Background(), nil)
	ends := endOffsets(t, brokers, "lag")
	for _, part := range []string{"0", "1"} {
		if _, n := gauge(t, reg, "creditflow_consumer_group_lag_records", map[string]string{"group": "lg", "topic": "lag", "partition": part}); n != 1 {
			t.Errorf("no lag series for partition %s of a group without members", part)
		}
	}
	if lag, _ := gauge(t, reg, "creditflow_consumer_group_lag_records", map[string]string{"group": "lg"}); lag != 10 {
		t.Errorf("lag of the stopped group: %v, want the 10 records written after it stopped", lag)
	}
	if lag, _ := gauge(t, reg, "creditflow_consumer_group_lag_records", map[string]string{"group": "never"}); lag != float64(ends[0]+ends[1]) {
		t.Errorf("lag of a group that never committed: %v, want %d", lag, ends[0]+ends[1])
	}
	if c, _ := gauge(t, reg, "creditflow_consumer_group_committed_offset", map[string]string{"group": "never"}); c != -2 {
		t.Errorf("committed offsets of a group that never committed: sum %v, want -1 per partition", c)
	}
	lags, err := consumers.GroupLag(context.Background(), brokers, kafkasec.Config{}, "lg", "lag")
	if err != nil || len(lags) != 2 || lags[0].Lag+lags[1].Lag != 10 || lags[0].End != ends[0] {
		t.Fatalf("GroupLag: %+v, %v", lags, err)
	}
}
