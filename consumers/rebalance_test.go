package consumers_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/producers"
)

// checker is a claim handler that checks offset order per claim, commits
// every 10 records and flushes a final commit when its ctx ends.
type checker struct {
	t       *testing.T
	mu      sync.Mutex
	seen    map[offKey]int
	commits map[int][]int64 // successful commits per partition, in completion order
	handled atomic.Int64
	values  map[int][]string // per partition, values in delivery order (first delivery only)
}

func newChecker(t *testing.T) *checker {
	return &checker{t: t, seen: map[offKey]int{}, commits: map[int][]int64{}, values: map[int][]string{}}
}

func (c *checker) handler(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
	next := cl.StartOffset
	last := cl.StartOffset
	doCommit := func() {
		if next == last {
			return
		}
		if err := commit(context.Background(), next); err == nil {
			c.mu.Lock()
			c.commits[cl.Partition] = append(c.commits[cl.Partition], next)
			c.mu.Unlock()
			last = next
		}
	}
	for r := range cl.Records {
		if r.Offset != next {
			c.t.Errorf("partition %d generation %d: got offset %d, want %d (gap or reorder)", cl.Partition, cl.Generation, r.Offset, next)
		}
		next = r.Offset + 1
		c.mu.Lock()
		k := offKey{r.Partition, r.Offset}
		if c.seen[k] == 0 {
			c.values[r.Partition] = append(c.values[r.Partition], string(r.Value))
			c.handled.Add(1)
		}
		c.seen[k]++
		c.mu.Unlock()
		if (r.Offset+1)%10 == 0 {
			doCommit()
		}
	}
	doCommit() // flush on rebalance / shutdown
	return nil
}

func (c *checker) verify(ends, final map[int]int64) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	dups := 0
	for part, end := range ends {
		for o := int64(0); o < end; o++ {
			n := c.seen[offKey{part, o}]
			if n == 0 {
				c.t.Errorf("partition %d offset %d never delivered", part, o)
			}
			dups += n - 1
		}
		if final[part] != end {
			c.t.Errorf("partition %d: final commit %d, want end %d", part, final[part], end)
		}
		cs := c.commits[part]
		for i := 1; i < len(cs); i++ {
			if cs[i] < cs[i-1] {
				c.t.Errorf("partition %d: commit went backwards %d -> %d (a stale member moved the offset)", part, cs[i-1], cs[i])
			}
		}
	}
	c.t.Logf("redelivered records: %d", dups)
}

// checkPerKeyOrder checks values "k:seq" arrive in seq order per key.
func checkPerKeyOrder(t *testing.T, values map[int][]string) {
	t.Helper()
	for part, vs := range values {
		lastSeq := map[string]int{}
		for _, v := range vs {
			k, s, _ := strings.Cut(v, ":")
			seq, _ := strconv.Atoi(s)
			if prev, ok := lastSeq[k]; ok && seq != prev+1 {
				t.Errorf("partition %d key %s: seq %d after %d", part, k, seq, prev)
			}
			if _, ok := lastSeq[k]; !ok && seq != 0 {
				t.Errorf("partition %d key %s: first seq %d, want 0", part, k, seq)
			}
			lastSeq[k] = seq
		}
	}
}

func TestRebalanceUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("rebalance under load takes ~10s")
	}
	b := brokertest.Start(t, broker.WithTopics(6, "load"))
	brokers := b.Addrs()
	p := newProducer(t, brokers)
	const batches, per, keys = 60, 50, 23
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; i < batches; i++ {
			produceSeq(t, p, "load", keys, i*per, per)
			time.Sleep(25 * time.Millisecond)
		}
	}()
	c := newChecker(t)
	type member struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func() member {
		g, err := consumers.NewGroup(groupCfg(brokers, "load", "load"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := g.Run(ctx, c.handler); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		return member{cancel, done}
	}
	stop := func(m member) { m.cancel(); <-m.done }
	m1 := start()
	time.Sleep(300 * time.Millisecond)
	m2 := start()
	time.Sleep(300 * time.Millisecond)
	m3 := start()
	time.Sleep(600 * time.Millisecond)
	stop(m1)
	time.Sleep(600 * time.Millisecond)
	m4 := start()
	stop(m2)
	<-prodDone
	waitFor(t, 60*time.Second, "every record handled", func() bool { return c.handled.Load() >= batches*per })
	ends := endOffsets(t, brokers, "load")
	stop(m3) // m4 takes over and flushes on its own stop
	stop(m4)
	c.verify(ends, committed(t, brokers, "load", "load", 6))
	checkPerKeyOrder(t, c.values)
}

// TestBrokerOutage cuts every connection to the broker for a while under
// load; producer and consumer retry and resume without loss or reordering
// within a partition.
func TestBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("outage test takes ~10s")
	}
	b := brokertest.Start(t, broker.WithTopics(3, "flaky"))
	brokers := b.Addrs()
	p, err := producers.New(producers.Config{Brokers: brokers, RetryFor: 60 * time.Second, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := newChecker(t)
	g, err := consumers.NewGroup(groupCfg(brokers, "flaky", "flaky"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = g.Run(ctx, c.handler) }()

	const batches, per, keys = 40, 25, 11
	prodDone := make(chan error, 1)
	go func() {
		for i := 0; i < batches; i++ {
			msgs := make([]producers.Message, 0, per)
			for j := i * per; j < (i+1)*per; j++ {
				k := "k" + strconv.Itoa(j%keys)
				msgs = append(msgs, producers.Message{Topic: "flaky", Key: []byte(k), Value: []byte(k + ":" + strconv.Itoa(j/keys))})
			}
			pctx, pcancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := p.Produce(pctx, msgs...)
			pcancel()
			if err != nil {
				prodDone <- fmt.Errorf("batch %d: %w", i, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		prodDone <- nil
	}()
	time.Sleep(700 * time.Millisecond)
	b.Cut()
	time.Sleep(3 * time.Second)
	b.Restore()
	if err := <-prodDone; err != nil {
		t.Fatalf("producer did not survive the outage: %v", err)
	}
	waitFor(t, 60*time.Second, "every record consumed after the outage", func() bool { return c.handled.Load() >= batches*per })
	ends := endOffsets(t, brokers, "flaky")
	total := int64(0)
	for _, e := range ends {
		total += e
	}
	cancel() // the handler flushes its last commit on the way out
	<-runDone
	c.verify(ends, committed(t, brokers, "flaky", "flaky", 3))
	// The producer may duplicate a batch whose acknowledgement was lost in
	// the cut; per-key order must still hold for first deliveries, modulo
	// such duplicates, so check without duplicates of a whole batch.
	t.Logf("records in log: %d (produced %d)", total, batches*per)
	if total == batches*per {
		checkPerKeyOrder(t, c.values)
	}
}
