package state

import (
	"math"
)

// Action is what a Decision asks its caller to do.
type Action int

const (
	// Hold: the member joined an open group (or opened one); nothing is
	// written yet.
	Hold Action = iota
	// Finalize: a group closed (complete, or timed out with at least
	// MinGroupSize members: Partial); Result holds its computation. Write
	// its samples, then Ack the Close event.
	Finalize
	// Refused: the group computation refused a closing group (Err); the
	// EMA baseline is unchanged. Dead-letter its members as invalid.
	Refused
	// Incomplete: a group timed out with fewer than MinGroupSize members.
	// Dead-letter them as group_incomplete.
	Incomplete
	// Replayed: a close that a previous owner of the partition already
	// emitted (restored from the snapshot); its EMA update is applied,
	// nothing is written.
	Replayed
	// DuplicateMember: the member's trajectory_id is already in its
	// group; nothing is written and its offset is done.
	DuplicateMember
	// LateMember: the member's group closed before it arrived.
	// Dead-letter it (late).
	LateMember
	// SizeMismatchMember: the member's group_size disagrees with its open
	// group's (Group). Dead-letter it (group_size_mismatch).
	SizeMismatchMember
)

var actionNames = [...]string{"hold", "finalize", "refused", "incomplete", "replayed", "duplicate", "late", "group_size_mismatch"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "action(?)"
}

// Decision is one thing that happened to a partition's groups at one input
// position, in the order the caller must act on them.
type Decision[T, R any] struct {
	Action Action
	// Offset is the input position the decision belongs to: the record
	// handed in, or the next offset for an idle tick.
	Offset int64
	// Group is the group decided on: the closing group (Finalize, Refused,
	// Incomplete), the member's open group (Hold, SizeMismatchMember).
	Group *Group[T]
	// Member is the member handed in (Hold, DuplicateMember, LateMember, SizeMismatchMember).
	Member Member[T]
	// Partial: the group closed by its window with fewer than GroupSize members.
	Partial bool
	// Result is what the Compute function returned (Finalize; Refused when
	// it returned one with its error).
	Result R
	// Err is why the computation refused the group (Refused).
	Err error
	// Close is the ledger's record of a group closing (Finalize, Refused,
	// Incomplete, Replayed); nil without a ledger. Ack it once every output
	// of the decision is acknowledged; its EMAAfter is the baseline once
	// the close is applied.
	Close *CloseEvent
}

// Compute finalizes a closing group: it computes the group's result,
// updates ema (once, for a method with a baseline) and returns the
// result and the batch mean of the members' rewards. On error the
// partition restores ema; a result returned with the error is passed on in
// the Refused decision.
type Compute[T, R any] func(g *Group[T], partial bool, ema *EMA) (result R, batchMean float64, err error)

// Partition is the pure core of one input partition: its groups
// (Groups), its ledger (Ledger: offsets in flight, closes, snapshots) and
// its EMA baseline. A member, a refused record or an idle tick goes in; an
// ordered list of decisions comes out. It does no I/O and keeps no metrics:
// the advantage stage decodes records, feeds them in and acts on the
// decisions (samples, dead letters, acknowledgements, snapshots);
// `creditflow compute` feeds it JSON lines and writes the results. Both
// therefore group, close, and update the baseline by the same code.
//
// It is not safe for concurrent use.
type Partition[T, R any] struct {
	groups   *Groups[T]
	ledger   *Ledger // nil: no offsets or snapshots are kept (NewBatch)
	ema      EMA
	compute  Compute[T, R]
	windowed bool
	next     int64 // the next input offset
	lastWM   int64 // event-time watermark at the last record
	out      []Decision[T, R]
}

// NewStream starts the core of a partition of the advantage stage at
// offset start, restoring snap when it is not nil (see NewLedger). It
// returns the core and the offset to resume reading at.
func NewStream[T, R any](topic string, partition int, start int64, snap *Snapshot, window WindowConfig, compute Compute[T, R]) (*Partition[T, R], int64) {
	ledger, resume := NewLedger(topic, partition, start, snap)
	p := &Partition[T, R]{groups: NewGroups[T](window), ledger: ledger, compute: compute, windowed: true, next: resume}
	if snap != nil {
		p.ema = ledger.BaseEMA()
		p.groups.SetWatermark(ledger.BaseWatermark())
		for _, c := range snap.Closed {
			p.groups.Remember(c)
		}
		for _, e := range snap.Emitted {
			p.groups.Remember(ClosedGroup{PromptID: e.PromptID, Members: e.Members})
		}
	}
	p.lastWM = p.groups.Watermark()
	return p, resume
}

// NewBatch is the core of a finite input without a window (`creditflow
// compute`): a group closes when its GroupSize-th member arrives or at End;
// every closed group is remembered, so a member of a finalized group is
// always late; no offsets or snapshots are kept. Offsets only order the
// groups (End) and may be line numbers.
func NewBatch[T, R any](compute Compute[T, R]) *Partition[T, R] {
	return &Partition[T, R]{groups: NewGroups[T](WindowConfig{TimeoutMs: math.MaxInt64, MinGroupSize: 1, ClosedMemory: math.MaxInt}),
		compute: compute}
}

// Next is the next input offset: one past the last record handed in, or
// the offset to resume at.
func (p *Partition[T, R]) Next() int64 { return p.next }

// EMA is the baseline as of the decisions returned so far.
func (p *Partition[T, R]) EMA() EMA { return p.ema }

// Open is the number of open groups.
func (p *Partition[T, R]) Open() int { return p.groups.Open() }

// Reject records a record that could not be decoded or validated: it is
// in flight (its dead letter is the caller's) and closes nothing.
func (p *Partition[T, R]) Reject(offset int64) {
	p.next = offset + 1
	if p.ledger != nil {
		p.ledger.Read(offset, p.groups.Watermark())
	}
}

// Handle puts a member into its group. The decisions come in this order:
// the groups whose windows the member's event time expired and the
// replayed closes before it (by their first member's offset), the
// member's own (Hold, Finalize of the group it completed,
// DuplicateMember, LateMember or SizeMismatchMember), then the replayed closes after it. The
// returned slice is valid until the next call.
func (p *Partition[T, R]) Handle(promptID string, groupSize int, m Member[T]) []Decision[T, R] {
	p.out = p.out[:0]
	p.next = m.Offset + 1
	if p.ledger != nil {
		p.ledger.Read(m.Offset, m.EventMs)
	}
	var expired []Expired[T]
	if p.windowed {
		expired = p.groups.Observe(m.EventMs)
		p.lastWM = p.groups.Watermark()
	}
	p.closeBefore(m.Offset, expired)

	verdict, grp := p.groups.Add(promptID, groupSize, m)
	d := Decision[T, R]{Offset: m.Offset, Group: grp, Member: m}
	switch verdict {
	case Added:
		d.Action = Hold
		p.out = append(p.out, d)
	case Duplicate:
		if p.ledger != nil {
			p.ledger.Done(m.Offset)
		}
		d.Action, d.Group = DuplicateMember, nil
		p.out = append(p.out, d)
	case Late:
		d.Action = LateMember
		p.out = append(p.out, d)
	case SizeMismatch:
		d.Action = SizeMismatchMember
		p.out = append(p.out, d)
	case Completed:
		p.finalize(grp, false, m.Offset, PhaseAfter)
	}
	if p.ledger != nil {
		for _, e := range p.ledger.Replays(m.Offset, PhaseAfter) {
			p.replayed(e)
		}
	}
	return p.out
}

// Idle moves event time forward on a partition that has been quiet for
// quietMs of processing time (docs/stream.md, "Idle partitions"): the
// watermark becomes the last record's event time plus quietMs, and the
// windows that expire close at the next offset, like Handle's first
// decisions. The returned slice is valid until the next call.
func (p *Partition[T, R]) Idle(quietMs int64) []Decision[T, R] {
	p.out = p.out[:0]
	if !p.windowed || p.groups.Open() == 0 {
		return p.out
	}
	p.closeBefore(p.next, p.groups.AdvanceIdle(p.lastWM+quietMs))
	return p.out
}

// End finalizes every open group as partial, in the order their first
// members arrived (the end of a finite input).
func (p *Partition[T, R]) End() []Decision[T, R] {
	p.out = p.out[:0]
	for _, g := range p.groups.CloseAll() {
		p.finalize(g, true, p.next, PhaseBefore)
	}
	return p.out
}

// closeBefore decides the closes at offset off that come before its
// record: freshly expired groups and replayed ones, in first-member order.
func (p *Partition[T, R]) closeBefore(off int64, expired []Expired[T]) {
	var replays []CloseEvent
	if p.ledger != nil {
		replays = p.ledger.Replays(off, PhaseBefore)
	}
	i, j := 0, 0
	for i < len(expired) || j < len(replays) {
		if j >= len(replays) || (i < len(expired) && expired[i].Group.FirstOffset < replays[j].FirstOffset) {
			e := expired[i]
			i++
			if e.Partial {
				p.finalize(e.Group, true, off, PhaseBefore)
			} else {
				p.incomplete(e.Group, off)
			}
			continue
		}
		p.replayed(replays[j])
		j++
	}
}

func (p *Partition[T, R]) finalize(g *Group[T], partial bool, off int64, phase string) {
	before := p.ema
	r, mean, err := p.compute(g, partial, &p.ema)
	d := Decision[T, R]{Action: Finalize, Offset: off, Group: g, Partial: partial, Result: r}
	ev := CloseEvent{Offset: off, Phase: phase, FirstOffset: g.FirstOffset, PromptID: g.PromptID, Members: memberIDs(g)}
	if err != nil {
		p.ema = before
		d.Action, d.Err = Refused, err
	} else {
		ev.Finalized, ev.BatchMean = true, mean
	}
	ev.EMAAfter = p.ema
	d.Close = p.close(ev)
	p.out = append(p.out, d)
}

func (p *Partition[T, R]) incomplete(g *Group[T], off int64) {
	p.out = append(p.out, Decision[T, R]{Action: Incomplete, Offset: off, Group: g,
		Close: p.close(CloseEvent{Offset: off, Phase: PhaseBefore, FirstOffset: g.FirstOffset, PromptID: g.PromptID,
			Members: memberIDs(g), EMAAfter: p.ema})})
}

// replayed applies a close that a previous owner already emitted.
func (p *Partition[T, R]) replayed(e CloseEvent) {
	if e.Finalized {
		p.ema = e.EMAAfter
	}
	p.groups.Remember(ClosedGroup{PromptID: e.PromptID, Members: e.Members})
	p.out = append(p.out, Decision[T, R]{Action: Replayed, Offset: e.Offset, Close: p.ledger.Close(e, true)})
}

func (p *Partition[T, R]) close(e CloseEvent) *CloseEvent {
	if p.ledger == nil {
		return nil
	}
	return p.ledger.Close(e, false)
}

// Done marks an input offset finished: every output its decisions caused
// is acknowledged.
func (p *Partition[T, R]) Done(offset int64) {
	if p.ledger != nil {
		p.ledger.Done(offset)
	}
}

// Ack marks a close's outputs acknowledged.
func (p *Partition[T, R]) Ack(e *CloseEvent) {
	if p.ledger != nil && e != nil {
		p.ledger.Ack(e)
	}
}

// Pending is the number of input offsets in flight.
func (p *Partition[T, R]) Pending() int {
	if p.ledger == nil {
		return 0
	}
	return p.ledger.Pending()
}

// Committable is the offset a restarted processor would resume at: every
// offset below it is done.
func (p *Partition[T, R]) Committable() int64 {
	if p.ledger == nil {
		return p.next
	}
	return p.ledger.Committable()
}

// Snapshot prunes what lies before the committable offset and returns the
// partition's state as of it (Ledger.Snapshot); its NextOffset is the
// offset to commit.
func (p *Partition[T, R]) Snapshot() Snapshot { return p.ledger.Snapshot(p.groups.Closed()) }

func memberIDs[T any](g *Group[T]) []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.TrajectoryID
	}
	return ids
}
