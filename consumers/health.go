package consumers

// What a Group reports about its own health: whether it is in a
// generation, which partitions it holds, and, per partition, whether
// records wait for the handler and since when it last took one, and
// whether records the handler took are not committed yet and since when
// the committed offset last moved. The process's /readyz and /livez
// (docs/stream.md, "Health") are computed from it.

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Health is a snapshot of a Group's state.
type Health struct {
	// GroupID names the group.
	GroupID string
	// Joined is true while the member is in a generation (JoinGroup and
	// SyncGroup done, handlers running).
	Joined bool
	// Generation is the current generation's id (0 before the first).
	Generation int32
	// Partitions are the partitions assigned in the current generation,
	// as "topic/partition", sorted.
	Partitions []string
	// LastCommit is when a commit of this member last succeeded (zero
	// before the first).
	LastCommit time.Time
	// Uncommitted lists the partitions with records delivered and not yet
	// committed, with how long their committed offset has not moved
	// (since the records became pending, or since the last commit that
	// moved it, whichever is later). A partition that is caught up is not
	// listed.
	Uncommitted []Stall
	// Waiting lists the partitions with records waiting for the handler
	// to take them, with how long the handler has taken none (a handler
	// that keeps up is not listed).
	Waiting []Stall
}

// Stall is one partition with input not yet handled.
type Stall struct {
	Partition string        // "topic/partition"
	For       time.Duration // time without progress
	Records   int64         // records pending
}

// Oldest is the longest Stall.For of stalls (ok false when there is none).
func Oldest(stalls []Stall) (s Stall, ok bool) {
	for _, x := range stalls {
		if !ok || x.For > s.For {
			s, ok = x, true
		}
	}
	return s, ok
}

// partHealth is the progress of one claimed partition. The fetcher
// updates it with atomics only (it runs once per record).
type partHealth struct {
	delivered atomic.Int64 // next offset after the last delivered record
	committed atomic.Int64 // last committed next-offset
	since     atomic.Int64 // Unix ns: the committed offset last moved, or records became pending
	sent      atomic.Int64 // records put in the claim's channel
	ch        chan Record  // the claim's channel (nil before the claim starts)

	// under healthState.mu
	taken   int64     // records the handler had taken at the last look
	takenAt time.Time // when taken last changed, or nothing was waiting
}

// healthState is the mutable state behind Group.Health.
type healthState struct {
	mu         sync.Mutex
	joined     bool
	generation int32
	parts      map[string]*partHealth
	lastCommit time.Time
}

func (h *healthState) startGeneration(id int32, parts []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joined, h.generation = true, id
	h.parts = make(map[string]*partHealth, len(parts))
	now := time.Now()
	for _, p := range parts {
		ph := &partHealth{takenAt: now}
		ph.delivered.Store(-1)
		ph.committed.Store(-1)
		h.parts[p] = ph
	}
}

func (h *healthState) endGeneration() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joined = false
	h.parts = nil
}

// started records where a claimed partition starts (nothing pending) and
// the channel its records go through; it returns the partition's state
// for the fetcher (nil when the generation is already over).
func (h *healthState) started(part string, offset int64, ch chan Record) *partHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.parts[part]
	if p == nil {
		return nil
	}
	p.delivered.Store(offset)
	p.committed.Store(offset)
	p.since.Store(time.Now().UnixNano())
	p.ch, p.takenAt = ch, time.Now()
	return p
}

// deliver records a record put in the claim's channel.
func (p *partHealth) deliver(next int64) {
	if p == nil {
		return
	}
	p.sent.Add(1)
	if prev := p.delivered.Swap(next); prev <= p.committed.Load() {
		p.since.Store(time.Now().UnixNano()) // nothing was pending: the clock starts now
	}
}

func (h *healthState) committed(part string, next int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.lastCommit = now
	if p := h.parts[part]; p != nil && next > p.committed.Load() {
		p.committed.Store(next)
		p.since.Store(now.UnixNano())
	}
}

func (h *healthState) snapshot(groupID string) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{GroupID: groupID, Joined: h.joined, Generation: h.generation, LastCommit: h.lastCommit}
	now := time.Now()
	for name, p := range h.parts {
		out.Partitions = append(out.Partitions, name)
		if d, c := p.delivered.Load(), p.committed.Load(); d > c && c >= 0 {
			out.Uncommitted = append(out.Uncommitted, Stall{Partition: name, For: now.Sub(time.Unix(0, p.since.Load())), Records: d - c})
		}
		if p.ch == nil {
			continue
		}
		queued := int64(len(p.ch))
		taken := p.sent.Load() - queued
		if taken != p.taken || queued == 0 {
			p.taken, p.takenAt = taken, now
		}
		if queued > 0 {
			out.Waiting = append(out.Waiting, Stall{Partition: name, For: now.Sub(p.takenAt), Records: queued})
		}
	}
	sort.Strings(out.Partitions)
	for _, s := range [][]Stall{out.Uncommitted, out.Waiting} {
		sort.Slice(s, func(i, j int) bool { return s[i].Partition < s[j].Partition })
	}
	return out
}

// Health reports the group's state (safe to call at any time, also
// before Run and after it returned).
func (g *Group) Health() Health { return g.health.snapshot(g.cfg.GroupID) }
