package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// overhead runs the advantage stage on a fresh topic fed at rate records/s,
// one group per produce call, and returns the p50 and p99 in milliseconds of
// the time from the group's last member being acknowledged into `scored` to
// the group's last sample being delivered whole (its chunks put back
// together) to a consumer of `samples` (so it also counts that consumer's
// fetch: an upper bound of the stage's own overhead).
func (e *benchEnv) overhead(ctx context.Context, method vocab.Method, keys, values [][]byte, rate float64, maxTokens int) (p50, p99 float64, err error) {
	if rate <= 0 {
		return 0, 0, errors.New("overhead: no measured rate to run at")
	}
	topics, err := e.topics(ctx, e.partitions)
	if err != nil {
		return 0, 0, err
	}
	defer e.drop(ctx, all(topics)...)
	st, err := e.startStage(ctx, "advantage", method, topics, maxTokens, 1, nil)
	if err != nil {
		return 0, 0, err
	}
	defer st.stop()

	watch := e.name("watch")
	w, err := watchGroups(ctx, e.brokers, topics.Samples, watch)
	if err != nil {
		return 0, 0, err
	}
	defer w.close()
	if !cmdutil.WaitSettled(ctx, e.brokers, 1, e.timeout, st.cfg.GroupID+".advantage", watch) {
		return 0, 0, errors.New("overhead: the consumer groups did not settle")
	}

	prod, err := producers.New(e.producerConfig())
	if err != nil {
		return 0, 0, err
	}
	defer prod.Close()
	hdr := []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.ScoredRecords().Name())}}
	interval := time.Duration(float64(benchGroupSize) / rate * float64(time.Second))
	sent := map[string]time.Time{}
	var order []string
	start := time.Now()
	e.prog.start("overhead", len(values))
	for i := 0; i < len(values); i += benchGroupSize {
		if d := time.Until(start.Add(time.Duration(len(order)) * interval)); d > 0 && !cmdutil.SleepCtx(ctx, d) {
			return 0, 0, ctx.Err()
		}
		var msgs []producers.Message
		for j := i; j < min(i+benchGroupSize, len(values)); j++ {
			msgs = append(msgs, producers.Message{Topic: topics.Scored, Key: keys[j], Value: values[j], Headers: hdr})
		}
		if err := prod.Produce(ctx, msgs...); err != nil {
			return 0, 0, err
		}
		k := string(keys[i])
		sent[k] = time.Now()
		order = append(order, k)
		e.prog.set(i+len(msgs), w.groups()*benchGroupSize)
	}
	deadline := time.Now().Add(e.timeout)
	for {
		n := w.groups()
		e.prog.set(len(values), n*benchGroupSize)
		if n >= len(order) {
			break
		}
		if time.Now().After(deadline) {
			e.prog.stop()
			return 0, 0, fmt.Errorf("overhead: %d of %d groups came out within %s", n, len(order), e.timeout)
		}
		if !cmdutil.SleepCtx(ctx, 10*time.Millisecond) {
			return 0, 0, ctx.Err()
		}
	}
	e.prog.stop()
	lat := make([]float64, 0, len(order))
	for _, k := range order {
		done, _ := w.doneAt(k)
		lat = append(lat, max(0, done.Sub(sent[k]).Seconds()*1000))
	}
	sort.Float64s(lat)
	return quantile(lat, 0.5), quantile(lat, 0.99), nil
}

// groupWatcher follows a samples topic and notes when each group's last
// sample arrived. Samples over the producer's batch limit (128k tokens) are
// written as chunks: the watcher puts them back together, as a trainer does,
// so that a group is done when its last sample is whole, not at its fifth
// chunk.
type groupWatcher struct {
	stop func()
	mu   sync.Mutex
	seen map[string]int       // samples per prompt id
	done map[string]time.Time // when a prompt's benchGroupSize-th sample arrived
}

// watchGroups starts a groupWatcher on topic as consumer group id, reading
// from the earliest offset.
func watchGroups(ctx context.Context, brokers []string, topic, id string) (*groupWatcher, error) {
	g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: id, Topics: []string{topic}, StartAt: "earliest",
		Reassembly: &consumers.ReassemblyConfig{}})
	if err != nil {
		return nil, err
	}
	w := &groupWatcher{seen: map[string]int{}, done: map[string]time.Time{}}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Run(wctx, func(ctx context.Context, c consumers.Claim, _ consumers.CommitFunc) error {
			for rec := range c.Records {
				now := time.Now()
				prompt := string(rec.Key) // samples are keyed by prompt id
				w.mu.Lock()
				if w.seen[prompt]++; w.seen[prompt] == benchGroupSize {
					w.done[prompt] = now
				}
				w.mu.Unlock()
			}
			return nil
		})
	}()
	w.stop = func() { cancel(); g.Close(); wg.Wait() }
	return w, nil
}

// groups is how many groups are done.
func (w *groupWatcher) groups() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

// doneAt is when the group of prompt id was done.
func (w *groupWatcher) doneAt(prompt string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.done[prompt]
	return t, ok
}

// samples is how many whole samples of prompt id arrived.
func (w *groupWatcher) samples(prompt string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[prompt]
}

func (w *groupWatcher) close() { w.stop() }

// quantile of sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs)) + 0.5)
	return xs[min(max(i-1, 0), len(xs)-1)]
}

// memResult is what the advantage stage holds with many open groups.
type memResult struct {
	OpenGroups         int
	HeapBytes          uint64 // Go heap in use with the groups open (after GC)
	RSSBytes           uint64 // resident set of the bench process
	BrokerRSSBytes     uint64 // resident set of the embedded broker's process (0 with --brokers)
	BytesPerOpenMember float64
}

// memory opens groups groups of one member each (G = 5, so none completes)
// in the advantage stage and measures the Go heap the stage holds for them:
// the heap after GC with the groups open minus the heap after GC before the
// stage started, divided by the open members.
func (e *benchEnv) memory(ctx context.Context, method vocab.Method, scored [][]byte, groups, maxTokens int) (memResult, error) {
	topics, err := e.topics(ctx, e.partitions)
	if err != nil {
		return memResult{}, err
	}
	defer e.drop(ctx, all(topics)...)
	keys := make([][]byte, groups)
	values := make([][]byte, groups)
	for i := range values {
		sc, err := schemas.ScoredRecords().Decode(scored[i%len(scored)])
		if err != nil {
			return memResult{}, err
		}
		t := &sc.Trajectory
		t.PromptID = fmt.Sprintf("open%07d", i)
		t.TrajectoryID = t.PromptID + "-0"
		t.CreatedAtMs = 1_767_225_600_000 + int64(i)
		if values[i], err = schemas.ScoredRecords().Encode(sc); err != nil {
			return memResult{}, err
		}
		keys[i] = []byte(t.PromptID)
	}
	if err := e.produceAll(ctx, topics.Scored, schemas.ScoredRecords().Name(), keys, values); err != nil {
		return memResult{}, err
	}
	keys, values = nil, nil
	before := heapInUse()
	st, err := e.startStage(ctx, "advantage", method, topics, maxTokens, 1, func(c *stage.Config) { c.IdleAfter = 0 })
	if err != nil {
		return memResult{}, err
	}
	defer st.stop()
	e.prog.start("memory", groups)
	defer e.prog.stop()
	deadline := time.Now().Add(e.timeout)
	for {
		in, _, _ := st.counts("advantage", topics.Samples)()
		e.prog.set(in, st.openGroups())
		if in >= groups && st.openGroups() >= groups {
			break
		}
		if time.Now().After(deadline) {
			return memResult{}, fmt.Errorf("memory: %d of %d groups open after %s", st.openGroups(), groups, e.timeout)
		}
		if !cmdutil.SleepCtx(ctx, 50*time.Millisecond) {
			return memResult{}, ctx.Err()
		}
	}
	after := heapInUse()
	res := memResult{OpenGroups: groups, HeapBytes: after, RSSBytes: procRSS("self")}
	if e.child != nil {
		res.BrokerRSSBytes = e.child.rss()
	}
	if after > before {
		res.BytesPerOpenMember = float64(after-before) / float64(groups)
	}
	return res, nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// procRSS is the resident set size of a process ("self" or a pid; 0 where
// /proc is missing).
func procRSS(pid string) uint64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
