package consumers_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

func newProducer(t testing.TB, brokers []string) *producers.Producer {
	t.Helper()
	p, err := producers.New(producers.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// produceSeq writes n records keyed k0..k(keys-1); the value of each record is
// "key:seq" where seq counts per key, so per-key order can be checked.
func produceSeq(t *testing.T, p *producers.Producer, topic string, keys, from, n int) {
	t.Helper()
	msgs := make([]producers.Message, 0, n)
	for i := from; i < from+n; i++ {
		k := "k" + strconv.Itoa(i%keys)
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte(k), Value: []byte(k + ":" + strconv.Itoa(i/keys))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

func groupCfg(brokers []string, group, topic string) consumers.Config {
	return consumers.Config{Brokers: brokers, GroupID: group, Topics: []string{topic},
		SessionTimeout: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, RebalanceTimeout: 5 * time.Second}
}

type offKey struct {
	p   int
	off int64
}

// collector records every delivered (partition, offset) and commits after
// each record.
type collector struct {
	mu    sync.Mutex
	seen  map[offKey]int
	count atomic.Int64
}

func newCollector() *collector { return &collector{seen: map[offKey]int{}} }

func (c *collector) handler(commitEach bool) consumers.ClaimFunc {
	return func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
		for r := range cl.Records {
			c.mu.Lock()
			c.seen[offKey{r.Partition, r.Offset}]++
			c.mu.Unlock()
			c.count.Add(1)
			if commitEach {
				if err := commit(ctx, r.Offset+1); err != nil {
					return nil // generation over; the next owner redoes this record
				}
			}
		}
		return nil
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func endOffsets(t *testing.T, brokers []string, topic string) map[int]int64 {
	t.Helper()
	e, err := consumers.EndOffsets(context.Background(), brokers, kafkasec.Config{}, topic)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func committed(t *testing.T, brokers []string, group, topic string, parts int) map[int]int64 {
	t.Helper()
	ps := make([]int, parts)
	for i := range ps {
		ps[i] = i
	}
	c, err := consumers.CommittedOffsets(context.Background(), brokers, kafkasec.Config{}, group, topic, ps)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestResumeAfterRestart(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(4, "events"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	const n = 400
	produceSeq(t, p, "events", 37, 0, n)

	// First member: commit after every record, stop after about half.
	type del struct {
		p      int
		off    int64
		member int
	}
	var mu sync.Mutex
	var log []del
	firstOffsets := map[int]int64{}
	var handled atomic.Int64
	run := func(member int, stopAfter int64) {
		g, err := consumers.NewGroup(groupCfg(brokers, "resume", "events"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
				mu.Lock()
				if member == 2 {
					firstOffsets[cl.Partition] = cl.StartOffset
				}
				mu.Unlock()
				for r := range cl.Records {
					if stopAfter > 0 && handled.Load() >= stopAfter {
						return nil // stop handling without committing further
					}
					mu.Lock()
					log = append(log, del{r.Partition, r.Offset, member})
					mu.Unlock()
					if err := commit(ctx, r.Offset+1); err != nil {
						return nil
					}
					handled.Add(1)
				}
				return nil
			})
		}()
		waitFor(t, 30*time.Second, fmt.Sprintf("member %d to handle its records", member), func() bool {
			if stopAfter > 0 {
				return handled.Load() >= stopAfter
			}
			return handled.Load() >= n
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	run(1, n/2)
	after1 := committed(t, brokers, "resume", "events", 4)
	run(2, 0)

	// Every record delivered exactly once in total: member 1 committed each
	// record it handled, so member 2 starts exactly after it.
	seen := map[offKey]int{}
	for _, d := range log {
		seen[offKey{d.p, d.off}]++
	}
	ends := endOffsets(t, brokers, "events")
	total := int64(0)
	for part, end := range ends {
		total += end
		for o := int64(0); o < end; o++ {
			if c := seen[offKey{part, o}]; c != 1 {
				t.Errorf("partition %d offset %d delivered %d times, want 1", part, o, c)
			}
		}
		want := after1[part]
		if want < 0 {
			want = 0
		}
		if firstOffsets[part] != want {
			t.Errorf("partition %d: member 2 started at %d, want the last commit %d", part, firstOffsets[part], want)
		}
	}
	if total != n {
		t.Fatalf("end offsets sum to %d, want %d", total, n)
	}
	final := committed(t, brokers, "resume", "events", 4)
	for part, end := range ends {
		if final[part] != end {
			t.Errorf("partition %d: committed %d, want end %d", part, final[part], end)
		}
	}
}

func TestStaleCommitRejected(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(1, "one"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "one", 1, 0, 10)

	type stale struct {
		commit consumers.CommitFunc
		gen    int32
	}
	staleCh := make(chan stale, 1)
	g1, err := consumers.NewGroup(groupCfg(brokers, "stale", "one"))
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	var firstGen atomic.Int32
	go func() {
		_ = g1.Run(ctx1, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			firstGen.CompareAndSwap(0, cl.Generation)
			n := 0
			for r := range cl.Records {
				n++
				if n == 5 && cl.Generation == firstGen.Load() {
					if err := commit(ctx, r.Offset+1); err != nil {
						t.Errorf("commit within the generation failed: %v", err)
					}
				}
			}
			// ctx ended: the generation is over. Hand the commit out.
			if cl.Generation != firstGen.Load() {
				return nil
			}
			select {
			case staleCh <- stale{commit, cl.Generation}:
			default:
			}
			return nil
		})
	}()
	waitFor(t, 30*time.Second, "the first commit", func() bool {
		return committed(t, brokers, "stale", "one", 1)[0] == 5
	})
	// A second member joins: the first member's generation ends.
	g2, err := consumers.NewGroup(groupCfg(brokers, "stale", "one"))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_ = g2.Run(ctx2, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			<-ctx.Done()
			return nil
		})
	}()
	var s stale
	select {
	case s = <-staleCh:
	case <-time.After(30 * time.Second):
		t.Fatal("the first member's generation never ended after a second member joined")
	}
	// The handler returns right after handing the commit out; let it return.
	time.Sleep(300 * time.Millisecond)
	err = s.commit(context.Background(), 9)
	if !errors.Is(err, consumers.ErrGenerationEnded) {
		t.Fatalf("stale commit: got %v, want ErrGenerationEnded", err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := committed(t, brokers, "stale", "one", 1)[0]; got != 5 {
		t.Fatalf("committed offset moved to %d after a stale commit, want 5", got)
	}
}

func TestBackpressure(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(1, "slow"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "slow", 1, 0, 2000)

	reg := prometheus.NewRegistry()
	cfg := groupCfg(brokers, "slow", "slow")
	cfg.Buffer = 16
	g, err := consumers.NewGroup(cfg, consumers.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			for range cl.Records {
				if handled.Add(1) == 5 {
					select { // stall: a slow handler
					case <-release:
					case <-ctx.Done():
					}
				}
			}
			return nil
		})
	}()
	waitFor(t, 30*time.Second, "5 records handled", func() bool { return handled.Load() >= 5 })
	time.Sleep(1500 * time.Millisecond) // give the fetcher every chance to run ahead
	delivered := testutil.ToFloat64(consumerRecords(t, reg))
	// Records pushed to the handler's channel: at most the 5 handled plus the
	// channel's buffer (the counter is bumped after a successful send).
	if delivered > float64(5+cfg.Buffer) {
		t.Fatalf("fetching did not pause: %v records delivered to a handler that took 5 (buffer %d)", delivered, cfg.Buffer)
	}
	if delivered < 5 {
		t.Fatalf("delivered counter %v below handled 5", delivered)
	}
	close(release)
	waitFor(t, 30*time.Second, "all records after the stall", func() bool { return handled.Load() >= 2000 })
	cancel()
	<-done
	if got := testutil.ToFloat64(consumerRecords(t, reg)); got != 2000 {
		t.Fatalf("creditflow_consumer_records_total = %v, want 2000", got)
	}
}

func consumerRecords(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "creditflow_consumer_records_total" {
			found = true
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	if !found {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return 0 })
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x"}, func() float64 { return sum })
}

// TestStaleMemberRejectedByCoordinator: a handler that ignores its ctx past
// the rebalance timeout is dropped from the group; the group moves on
// without it and its later commit is rejected by the coordinator.
func TestStaleMemberRejectedByCoordinator(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(1, "one"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "one", 1, 0, 10)
	cfg := groupCfg(brokers, "slowpoke", "one")
	cfg.RebalanceTimeout = 1500 * time.Millisecond
	cfg.SessionTimeout = 1500 * time.Millisecond

	staleErr := make(chan error, 1)
	g1, _ := consumers.NewGroup(cfg)
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	var first atomic.Bool
	go func() {
		_ = g1.Run(ctx1, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			if !first.CompareAndSwap(false, true) {
				<-ctx.Done()
				return nil
			}
			n := 0
			for r := range cl.Records {
				if n++; n == 5 {
					if err := commit(ctx, r.Offset+1); err != nil {
						t.Errorf("commit: %v", err)
					}
				}
			}
			// ctx ended (rebalance). Overrun the rebalance timeout, then commit.
			time.Sleep(4 * time.Second)
			staleErr <- commit(context.Background(), 9)
			return nil
		})
	}()
	waitFor(t, 30*time.Second, "the first commit", func() bool {
		return committed(t, brokers, "slowpoke", "one", 1)[0] == 5
	})
	got := make(chan int64, 4)
	g2, _ := consumers.NewGroup(cfg)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_ = g2.Run(ctx2, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			got <- cl.StartOffset
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case off := <-got:
		if off != 5 {
			t.Errorf("new owner starts at %d, want 5", off)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second member never got the partition")
	}
	var err error
	select {
	case err = <-staleErr:
	case <-time.After(30 * time.Second):
		t.Fatal("stale handler never committed")
	}
	if !errors.Is(err, consumers.ErrGenerationEnded) {
		t.Fatalf("stale member's commit: got %v, want ErrGenerationEnded", err)
	}
	t.Logf("stale commit rejected: %v", err)
	if c := committed(t, brokers, "slowpoke", "one", 1)[0]; c != 5 {
		t.Fatalf("committed offset is %d after the stale member's commit, want 5", c)
	}
}

var _ = sort.Ints

// A handler error ends the generation; the member rejoins and the
// partition is handed out again from the last commit.
func TestHandlerErrorRestartsFromCommit(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(1, "errs"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "errs", 1, 0, 20)
	g, err := consumers.NewGroup(groupCfg(brokers, "errs", "errs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts := make(chan int64, 4)
	var failed atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			starts <- cl.StartOffset
			for r := range cl.Records {
				if r.Offset == 7 && failed.CompareAndSwap(false, true) {
					return errors.New("handler failure")
				}
				if err := commit(ctx, r.Offset+1); err != nil {
					return nil
				}
			}
			return nil
		})
	}()
	for i, want := range []int64{0, 7} {
		select {
		case got := <-starts:
			if got != want {
				t.Fatalf("claim %d starts at %d, want %d", i, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("claim %d never came (Run returned? %v)", i, len(done))
		}
	}
	waitFor(t, 30*time.Second, "all committed", func() bool { return committed(t, brokers, "errs", "errs", 1)[0] == 20 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestStartAtLatest(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(1, "late"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	produceSeq(t, p, "late", 1, 0, 5)
	cfg := groupCfg(brokers, "late", "late")
	cfg.StartAt = "latest"
	g, err := consumers.NewGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts := make(chan int64, 1)
	got := make(chan int64, 10)
	go func() {
		_ = g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			starts <- cl.StartOffset
			for r := range cl.Records {
				got <- r.Offset
			}
			return nil
		})
	}()
	select {
	case s := <-starts:
		if s != 5 {
			t.Fatalf("latest start = %d, want 5", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no claim")
	}
	produceSeq(t, p, "late", 1, 5, 3)
	for want := int64(5); want < 8; want++ {
		select {
		case o := <-got:
			if o != want {
				t.Fatalf("got offset %d, want %d", o, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("records after start never came")
		}
	}
}
