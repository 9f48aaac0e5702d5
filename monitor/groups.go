package monitor

// Group completion. Samples carry group_size and partial, not the number of
// members a partial group closed with, so the monitor closes a group:
//
//   - when group_size distinct members (by trajectory_id) have been seen —
//     complete;
//   - when its members say partial and no further member arrived for
//     Config.GroupIdle of wall time — partial (the advantage stage writes a
//     group's samples together, so they arrive within moments of each other);
//   - at the end of a bounded read (--once), whatever it holds — partial if
//     its members say so, otherwise incomplete (members missing from what
//     was read, e.g. reading from a time or from latest);
//   - when more than Config.MaxOpenGroups groups are open, the oldest is
//     closed as incomplete.
//
// A closed group counts once in groups; zero_variance when every member's
// reward seen is equal (one member included), pass@G when at least one member
// succeeded. The group belongs to the policy version and the data source of
// its first member seen.

type openGroup struct {
	prompt      string
	source      string
	version     int64
	size        int32
	members     int32
	successes   int32
	partial     bool
	allEqual    bool
	firstReward float64
	lastSeenMs  int64
	seq         uint64
}

type queued struct {
	prompt string
	seq    uint64
}

// openGroups holds the groups waiting for members, bounded by max.
type openGroups struct {
	max   int
	m     map[string]*openGroup
	queue []queued // insertion order; entries of closed groups are skipped lazily
	head  int
	seq   uint64
}

func newOpenGroups(max int) *openGroups {
	return &openGroups{max: max, m: make(map[string]*openGroup)}
}

// member adds one (new, deduplicated) member and returns the group when it
// is now complete (removed from the open set), plus any group evicted to
// stay within the bound.
func (o *openGroups) member(prompt, source string, size int32, version int64, partial, success bool, reward float64, nowMs int64) (done, evicted *openGroup) {
	g := o.m[prompt]
	if g == nil {
		if len(o.m) >= o.max {
			evicted = o.evictOldest()
		}
		o.seq++
		g = &openGroup{prompt: prompt, source: source, version: version, size: size, allEqual: true, firstReward: reward, seq: o.seq}
		o.m[prompt] = g
		o.queue = append(o.queue, queued{prompt, g.seq})
		if len(o.queue)-o.head > 2*o.max+16 {
			o.compact()
		}
	} else if reward != g.firstReward {
		g.allEqual = false
	}
	g.members++
	g.lastSeenMs = nowMs
	g.partial = g.partial || partial
	if success {
		g.successes++
	}
	if g.size > 0 && g.members >= g.size {
		delete(o.m, prompt)
		return g, evicted
	}
	return nil, evicted
}

func (o *openGroups) evictOldest() *openGroup {
	for o.head < len(o.queue) {
		q := o.queue[o.head]
		o.queue[o.head] = queued{}
		o.head++
		if g := o.m[q.prompt]; g != nil && g.seq == q.seq {
			delete(o.m, q.prompt)
			return g
		}
	}
	return nil
}

func (o *openGroups) compact() {
	live := o.queue[:0]
	for _, q := range o.queue[o.head:] {
		if g := o.m[q.prompt]; g != nil && g.seq == q.seq {
			live = append(live, q)
		}
	}
	clear(o.queue[len(live):])
	o.queue, o.head = live, 0
}

// idle removes and returns the partial groups last fed at or before cutoffMs.
func (o *openGroups) idle(cutoffMs int64) []*openGroup {
	var out []*openGroup
	for p, g := range o.m {
		if g.partial && g.lastSeenMs <= cutoffMs {
			delete(o.m, p)
			out = append(out, g)
		}
	}
	return out
}

// all removes and returns every open group, oldest first.
func (o *openGroups) all() []*openGroup {
	var out []*openGroup
	for _, q := range o.queue[o.head:] {
		if g := o.m[q.prompt]; g != nil && g.seq == q.seq {
			delete(o.m, q.prompt)
			out = append(out, g)
		}
	}
	o.queue, o.head = o.queue[:0], 0
	return out
}
