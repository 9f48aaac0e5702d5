package consumers

// What a Group reports about its own health: whether it is in a
// generation, which partitions it holds, and, per partition, whether
// records were delivered that are not committed yet and since when. The
// process's /readyz and /livez (docs/stream.md, "Health") are computed from it.

import (
	"sort"
	"sync"
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
	// Stalled lists the partitions with records delivered and not yet
	// committed, with how long they have gone without their committed
	// offset moving (since the records became pending, or since the last
	// commit that moved it, whichever is later). A partition that is
	// caught up is not listed.
	Stalled []Stall
}

// Stall is one partition with uncommitted input.
type Stall struct {
	Partition string        // "topic/partition"
	For       time.Duration // time without progress
	Pending   int64         // records delivered and not committed
}

// Oldest is the longest Stall.For of h (0 when nothing is pending).
func (h Health) Oldest() (Stall, bool) {
	var out Stall
	found := false
	for _, s := range h.Stalled {
		if !found || s.For > out.For {
			out, found = s, true
		}
	}
	return out, found
}

// partHealth is the progress of one claimed partition.
type partHealth struct {
	delivered int64     // next offset after the last delivered record
	committed int64     // last committed next-offset
	since     time.Time // when the committed offset last moved, or pending began
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
	for _, p := range parts {
		h.parts[p] = &partHealth{delivered: -1, committed: -1}
	}
}

func (h *healthState) endGeneration() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joined = false
	h.parts = nil
}

// started records where a claimed partition starts: nothing is pending.
func (h *healthState) started(part string, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.parts[part]; p != nil {
		p.delivered, p.committed, p.since = offset, offset, time.Now()
	}
}

func (h *healthState) delivered(part string, next int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.parts[part]
	if p == nil || next <= p.delivered {
		return
	}
	if p.delivered <= p.committed { // nothing was pending: the clock starts now
		p.since = time.Now()
	}
	p.delivered = next
}

func (h *healthState) committed(part string, next int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.lastCommit = now
	if p := h.parts[part]; p != nil && next > p.committed {
		p.committed, p.since = next, now
	}
}

func (h *healthState) snapshot(groupID string) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{GroupID: groupID, Joined: h.joined, Generation: h.generation, LastCommit: h.lastCommit}
	now := time.Now()
	for name, p := range h.parts {
		out.Partitions = append(out.Partitions, name)
		if p.delivered > p.committed && p.committed >= 0 {
			out.Stalled = append(out.Stalled, Stall{Partition: name, For: now.Sub(p.since), Pending: p.delivered - p.committed})
		}
	}
	sort.Strings(out.Partitions)
	sort.Slice(out.Stalled, func(i, j int) bool { return out.Stalled[i].Partition < out.Stalled[j].Partition })
	return out
}

// Health reports the group's state (safe to call at any time, also
// before Run and after it returned).
func (g *Group) Health() Health { return g.health.snapshot(g.cfg.GroupID) }
