package state

import (
	"fmt"
	"math"
	"sort"
)

// WindowConfig sets how groups close (docs/stream.md).
type WindowConfig struct {
	TimeoutMs    int64 // window length after the first member's event time (default 120 000)
	MinGroupSize int   // members needed to finalize a timed-out group as partial (default 2)
	ClosedMemory int   // closed groups remembered to tell late members from duplicates (default 4096)
}

// DefaultWindow is docs/stream.md's defaults.
func DefaultWindow() WindowConfig {
	return WindowConfig{TimeoutMs: 120_000, MinGroupSize: 2, ClosedMemory: 4096}
}

// Member is one trajectory of a group as the advantage stage holds it.
type Member[T any] struct {
	TrajectoryID string
	Offset       int64 // input offset of the record
	EventMs      int64 // event time (the trajectory's creation time)
	Value        T
}

// Group is an open or just-closed group.
type Group[T any] struct {
	PromptID     string
	GroupSize    int
	FirstOffset  int64
	FirstEventMs int64
	Members      []Member[T] // in input order
}

// Verdict says what Add did with a member.
type Verdict int

const (
	Added        Verdict = iota // joined an open group (or opened one)
	Completed                   // joined and completed its group: finalize it
	Duplicate                   // its trajectory_id is already in the open or emitted group: ignore
	Late                        // its group closed before it arrived: dead-letter "late"
	SizeMismatch                // its group_size disagrees with the group's: dead-letter "group_size_mismatch"
)

func (v Verdict) String() string {
	switch v {
	case Added:
		return "added"
	case Completed:
		return "completed"
	case Duplicate:
		return "duplicate"
	case Late:
		return "late"
	case SizeMismatch:
		return "group_size_mismatch"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Expired is a group whose window timed out: Finalize it as partial when
// Partial is true, else dead-letter its members as group_incomplete.
type Expired[T any] struct {
	Group   *Group[T]
	Partial bool // len(Members) >= MinGroupSize
}

// ClosedGroup is what is remembered of a closed group.
type ClosedGroup struct {
	PromptID string   `json:"prompt_id"`
	Members  []string `json:"members"`
}

// Groups is the windowed group table of one input partition, keyed by
// prompt_id. It is not safe for concurrent use.
//
// Time is event time: Observe moves the partition's event-time watermark
// (the largest event time seen) and a group expires once the watermark
// reaches its first member's event time plus the timeout. Replaying the same
// records therefore expires the same groups at the same records.
type Groups[T any] struct {
	cfg        WindowConfig
	open       map[string]*Group[T]
	watermark  int64
	closed     map[string]ClosedGroup
	closedFIFO []string
	// earliest is at most the smallest FirstEventMs of the open groups (it
	// may lag behind when the earliest group closes), so that Observe scans
	// the open groups only when one of them may have expired: once per
	// expiry instead of once per record.
	earliest int64
}

// NewGroups returns an empty table.
func NewGroups[T any](cfg WindowConfig) *Groups[T] {
	if cfg.TimeoutMs <= 0 {
		cfg.TimeoutMs = DefaultWindow().TimeoutMs
	}
	if cfg.MinGroupSize <= 0 {
		cfg.MinGroupSize = 1
	}
	if cfg.ClosedMemory <= 0 {
		cfg.ClosedMemory = DefaultWindow().ClosedMemory
	}
	return &Groups[T]{cfg: cfg, open: map[string]*Group[T]{}, closed: map[string]ClosedGroup{}}
}

// Watermark is the event-time watermark (largest event time observed).
func (g *Groups[T]) Watermark() int64 { return g.watermark }

// SetWatermark restores the watermark (from a snapshot).
func (g *Groups[T]) SetWatermark(ms int64) { g.watermark = ms }

// Open is the number of open groups.
func (g *Groups[T]) Open() int { return len(g.open) }

// Observe advances the watermark to eventMs (if later) and returns the groups
// whose windows expired, ordered by their first member's offset. Call it with
// each record's event time before Add.
func (g *Groups[T]) Observe(eventMs int64) []Expired[T] {
	if eventMs > g.watermark {
		g.watermark = eventMs
	}
	return g.expire()
}

// AdvanceIdle moves the watermark forward by processing time when the
// partition has been idle; see the package doc. It returns expired groups like Observe.
func (g *Groups[T]) AdvanceIdle(toMs int64) []Expired[T] { return g.Observe(toMs) }

func (g *Groups[T]) expire() []Expired[T] {
	if len(g.open) == 0 || g.watermark-g.earliest < g.cfg.TimeoutMs {
		return nil // no open group's first event is old enough
	}
	var out []Expired[T]
	earliest := int64(math.MaxInt64)
	for _, grp := range g.open {
		if g.watermark-grp.FirstEventMs >= g.cfg.TimeoutMs {
			out = append(out, Expired[T]{Group: grp, Partial: len(grp.Members) >= g.cfg.MinGroupSize})
		} else {
			earliest = min(earliest, grp.FirstEventMs)
		}
	}
	g.earliest = earliest
	sort.Slice(out, func(i, j int) bool { return out[i].Group.FirstOffset < out[j].Group.FirstOffset })
	for _, e := range out {
		g.close(e.Group)
	}
	return out
}

// Add puts a member into its group. With Completed, the returned group is
// closed and must be finalized; with other verdicts it is the open group (or nil).
func (g *Groups[T]) Add(promptID string, groupSize int, m Member[T]) (Verdict, *Group[T]) {
	if c, ok := g.closed[promptID]; ok {
		for _, id := range c.Members {
			if id == m.TrajectoryID {
				return Duplicate, nil
			}
		}
		return Late, nil
	}
	grp, ok := g.open[promptID]
	if !ok {
		grp = &Group[T]{PromptID: promptID, GroupSize: groupSize, FirstOffset: m.Offset, FirstEventMs: m.EventMs}
		if len(g.open) == 0 || m.EventMs < g.earliest {
			g.earliest = m.EventMs
		}
		g.open[promptID] = grp
	} else {
		if grp.GroupSize != groupSize {
			return SizeMismatch, grp
		}
		for _, x := range grp.Members {
			if x.TrajectoryID == m.TrajectoryID {
				return Duplicate, grp
			}
		}
	}
	grp.Members = append(grp.Members, m)
	if len(grp.Members) >= grp.GroupSize {
		g.close(grp)
		return Completed, grp
	}
	return Added, grp
}

// CloseAll closes every open group and returns them ordered by their first
// member's offset (the end of a finite input: `creditflow compute`).
func (g *Groups[T]) CloseAll() []*Group[T] {
	out := make([]*Group[T], 0, len(g.open))
	for _, grp := range g.open {
		out = append(out, grp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FirstOffset < out[j].FirstOffset })
	for _, grp := range out {
		g.close(grp)
	}
	return out
}

// IsClosed reports whether promptID is remembered as closed.
func (g *Groups[T]) IsClosed(promptID string) bool { _, ok := g.closed[promptID]; return ok }

// Remember records a group as closed without it having been open here (used
// when restoring a snapshot or skipping a group already emitted).
func (g *Groups[T]) Remember(c ClosedGroup) {
	if _, ok := g.closed[c.PromptID]; !ok {
		g.closedFIFO = append(g.closedFIFO, c.PromptID)
	}
	g.closed[c.PromptID] = c
	for len(g.closedFIFO) > g.cfg.ClosedMemory {
		delete(g.closed, g.closedFIFO[0])
		g.closedFIFO = g.closedFIFO[1:]
	}
}

// Closed lists the remembered closed groups, oldest first.
func (g *Groups[T]) Closed() []ClosedGroup {
	out := make([]ClosedGroup, 0, len(g.closedFIFO))
	for _, p := range g.closedFIFO {
		out = append(out, g.closed[p])
	}
	return out
}

func (g *Groups[T]) close(grp *Group[T]) {
	delete(g.open, grp.PromptID)
	ids := make([]string, len(grp.Members))
	for i, m := range grp.Members {
		ids[i] = m.TrajectoryID
	}
	g.Remember(ClosedGroup{PromptID: grp.PromptID, Members: ids})
}
