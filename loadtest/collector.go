package main

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/schemas"
)

// collector reads a samples topic and a dead-letter topic without a
// consumer group, partition by partition from offset 0, and keeps every
// copy of every sample by trajectory id.
type collector struct {
	e      *env
	topics stage.Topics

	mu       sync.Mutex
	copies   map[string][][]byte
	expected map[string]bool
	seen     int // distinct expected trajectory ids seen
	dead     int
	reasons  map[string]int
	next     map[string]int64 // "topic/partition" → next offset
	readErrs int
}

func newCollector(e *env, t stage.Topics, w workload) *collector {
	exp := map[string]bool{}
	for g := 0; g < w.groups; g++ {
		for i := 0; i < groupSize; i++ {
			exp[fmt.Sprintf("%s-%d", synth.PromptID(g), i)] = true
		}
	}
	return &collector{e: e, topics: t, copies: map[string][][]byte{}, expected: exp,
		reasons: map[string]int{}, next: map[string]int64{}}
}

// run polls until ctx ends.
func (c *collector) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.poll(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// poll reads what is new on both topics once.
func (c *collector) poll(ctx context.Context) {
	for _, topic := range []string{c.topics.Samples, c.topics.DeadLetters} {
		parts, err := consumers.Partitions(ctx, c.e.brokers, kafkasec.Config{}, topic)
		if err != nil {
			c.noteErr()
			continue
		}
		for _, p := range parts {
			key := topic + "/" + strconv.Itoa(p)
			c.mu.Lock()
			from := c.next[key]
			c.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			end, err := consumers.ReadPartitionRange(rctx, c.e.brokers, kafkasec.Config{}, topic, p, from, func(r consumers.Record) error {
				c.add(topic, r)
				c.mu.Lock()
				c.next[key] = r.Offset + 1
				c.mu.Unlock()
				return nil
			})
			cancel()
			if err != nil {
				c.noteErr()
				continue
			}
			c.mu.Lock()
			if end > c.next[key] {
				c.next[key] = end
			}
			c.mu.Unlock()
		}
	}
}

func (c *collector) noteErr() {
	c.mu.Lock()
	c.readErrs++
	c.mu.Unlock()
}

func (c *collector) add(topic string, r consumers.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if topic == c.topics.DeadLetters {
		c.dead++
		reason := "unknown"
		for _, h := range r.Headers {
			if h.Key == schemas.HeaderReason {
				reason = string(h.Value)
			}
		}
		c.reasons[reason]++
		return
	}
	id := string(r.Key)
	if s, err := schemas.Samples().Decode(r.Value); err == nil {
		id = s.TrajectoryID
	}
	if len(c.copies[id]) == 0 && c.expected[id] {
		c.seen++
	}
	c.copies[id] = append(c.copies[id], append([]byte(nil), r.Value...))
}

func (c *collector) progress() (seen, dead int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen, c.dead
}

// waitFor polls until n distinct expected samples were seen, ctx ends or
// the deadline passes; it reports whether n were seen.
// await logs progress every 5 s while runCtx lasts and waits until n
// samples were seen or timeout has passed since start.
func (c *collector) await(ctx, runCtx context.Context, name string, n int, start time.Time, timeout time.Duration, logf func(string, ...any)) bool {
	go func() {
		for cmdutil.SleepCtx(runCtx, 5*time.Second) {
			s, d := c.progress()
			logf("%s: %d/%d samples, %d dead letters (%.0fs)", name, s, n, d, time.Since(start).Seconds())
		}
	}()
	return c.waitFor(ctx, n, start.Add(timeout))
}

func (c *collector) waitFor(ctx context.Context, n int, deadline time.Time) bool {
	for {
		if s, _ := c.progress(); s >= n {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reference returns the first copy of every sample and checks that every
// copy of it is byte-identical; it returns the ids whose copies differ.
func (c *collector) reference() (map[string][]byte, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := make(map[string][]byte, len(c.copies))
	var differ []string
	for id, cs := range c.copies {
		ref[id] = cs[0]
		for _, x := range cs[1:] {
			if !bytes.Equal(x, cs[0]) {
				differ = append(differ, id)
				break
			}
		}
	}
	sort.Strings(differ)
	return ref, differ
}

// Comparison is the outcome of comparing a run's samples with a reference.
type Comparison struct {
	Expected   int      `json:"expected"`
	Seen       int      `json:"seen"`
	Lost       int      `json:"lost"`
	Mismatched int      `json:"mismatched"`
	Duplicates int      `json:"duplicates"`
	Unexpected int      `json:"unexpected"`
	Invalid    int      `json:"invalid"`
	LostIDs    []string `json:"lost_ids,omitempty"`
	BadIDs     []string `json:"mismatched_ids,omitempty"`
}

// OK reports whether nothing was lost, changed or invalid.
func (c Comparison) OK() bool { return c.Lost == 0 && c.Mismatched == 0 && c.Invalid == 0 }

// compare checks every copy of every sample against ref and validates it
// as a trainer would (demo.Check is applied by validate).
func (c *collector) compare(ref map[string][]byte, validate func([]byte) error) Comparison {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Comparison{Expected: len(c.expected)}
	for id := range c.expected {
		cs := c.copies[id]
		if len(cs) == 0 {
			r.Lost++
			r.LostIDs = append(r.LostIDs, id)
			continue
		}
		r.Seen++
		r.Duplicates += len(cs) - 1
		want, ok := ref[id]
		bad := !ok
		for _, x := range cs {
			if ok && !bytes.Equal(x, want) {
				bad = true
			}
			if validate != nil && validate(x) != nil {
				r.Invalid++
			}
		}
		if bad {
			r.Mismatched++
			r.BadIDs = append(r.BadIDs, id)
		}
	}
	for id := range c.copies {
		if !c.expected[id] {
			r.Unexpected++
		}
	}
	sort.Strings(r.LostIDs)
	sort.Strings(r.BadIDs)
	if len(r.LostIDs) > 20 {
		r.LostIDs = r.LostIDs[:20]
	}
	if len(r.BadIDs) > 20 {
		r.BadIDs = r.BadIDs[:20]
	}
	return r
}

func (c *collector) deadLetters() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.reasons))
	for k, v := range c.reasons {
		m[k] = v
	}
	return c.dead, m
}
