package stage

import (
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
)

// entry is a member held in an open group: its record as read, what the
// canonical member order needs and, while it is among the most recently read
// decodedBudget bytes of records, its decoded record. Older open members
// hold only their bytes (about the record's size instead of more than twice
// it) and finalize decodes them again; a group whose members arrive close
// together is decoded once. See docs/performance.md.
type entry struct {
	rec         consumers.Record
	sampleIndex int32
	read        time.Time
	scored      *schemas.Scored // nil once dropped from the decoded window
}

// decodedBudget bounds the record bytes whose decoded form open members keep,
// per partition (a variable for the tests).
var decodedBudget = 16 << 20

// decodedRef names a member that holds its decoded record.
type decodedRef struct {
	g      *state.Group[entry]
	i      int   // index in g.Members
	offset int64 // the member's offset, to recognize it
	n      int   // its record's bytes
}

// keepDecoded adds a member to the decoded window and drops the decoded
// records of the oldest members beyond decodedBudget.
func (p *partition) keepDecoded(r decodedRef) {
	p.decoded = append(p.decoded, r)
	p.decodedBytes += r.n
	drop := 0
	for p.decodedBytes > decodedBudget && drop < len(p.decoded)-1 {
		old := p.decoded[drop]
		if old.i < len(old.g.Members) && old.g.Members[old.i].Offset == old.offset {
			old.g.Members[old.i].Value.scored = nil
		}
		p.decodedBytes -= old.n
		drop++
	}
	if drop > 0 {
		p.decoded = append(p.decoded[:0], p.decoded[drop:]...)
	}
}
