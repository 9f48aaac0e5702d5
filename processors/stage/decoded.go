package stage

import (
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
)

// entry is a member held in an open group: its record as read, what the
// canonical member order needs and, while it is among the most recently read
// members of the decoded window, its decoded record. Older open members
// hold only their bytes (about the record's size instead of about three
// times it) and finalize decodes them again; a group whose members arrive
// close together is decoded once. See docs/performance.md.
type entry struct {
	rec         consumers.Record
	sampleIndex int32
	held        bool // counted in the partition's heldBytes
	read        time.Time
	scored      *schemas.Scored // nil once dropped from the decoded window
}

// The decoded window of a partition holds the decoded records of the most
// recently read members, up to decodedShare of the open members' record
// bytes, at least decodedFloor and at most decodedBudget bytes of records.
// A decoded record costs at most about 1.7 times its record (an AttnSR
// record's graphs are copied; a LAPO record's token arrays are views of its
// bytes, so it costs a small fraction), so with a third of the open bytes
// decoded an open member holds under 2 times its record once more than
// decodedFloor×3 bytes of members are open; below that, memory is bounded
// by decodedFloor; above 3×decodedBudget, the share falls further.
var (
	decodedBudget = 16 << 20 // a variable for the tests
	decodedFloor  = 2 << 20
)

const decodedShare = 3 // the window is at most 1/decodedShare of the open bytes (above the floor)

// decodedWindow is a partition's account of its open members: their record
// bytes and which of them hold their decoded record.
type decodedWindow struct {
	refs  []decodedRef // members holding a decoded record, oldest first
	bytes int          // record bytes of refs
	held  int          // record bytes of the open members (entry.held)
}

// release takes a finalized group's members out of the open bytes.
func (p *partition) release(g *state.Group[entry]) {
	for i := range g.Members {
		if e := &g.Members[i].Value; e.held {
			e.held = false
			p.window.held -= len(e.rec.Value)
		}
	}
}

// decodedRef names a member that holds its decoded record.
type decodedRef struct {
	g      *state.Group[entry]
	i      int   // index in g.Members
	offset int64 // the member's offset, to recognize it
	n      int   // its record's bytes
}

// keepDecoded adds a member to the decoded window and drops the decoded
// records of the oldest members beyond the window's budget.
func (p *partition) keepDecoded(r decodedRef) {
	p.window.refs = append(p.window.refs, r)
	p.window.bytes += r.n
	budget := min(decodedBudget, max(decodedFloor, p.window.held/decodedShare))
	drop := 0
	for p.window.bytes > budget && drop < len(p.window.refs)-1 {
		old := p.window.refs[drop]
		if old.i < len(old.g.Members) && old.g.Members[old.i].Offset == old.offset {
			old.g.Members[old.i].Value.scored = nil
		}
		p.window.bytes -= old.n
		drop++
	}
	if drop > 0 {
		p.window.refs = append(p.window.refs[:0], p.window.refs[drop:]...)
	}
}
