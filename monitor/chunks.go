package monitor

import (
	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/consumers"
)

// maxOpenFirsts bounds the first-chunk offsets remembered per partition
// for records still being reassembled (broken records are forgotten when
// it is reached).
const maxOpenFirsts = 4096

// chunks puts the records of one partition back together (a record too
// large for one Kafka message is written as chunks: producers.Split) and
// says where each record starts: its own offset, or its first chunk's.
// That offset is where Store.At reads it again.
type chunks struct {
	asm    *consumers.Assembler
	firsts map[string]int64 // chunked records in progress: first chunk's offset
}

func newChunks() *chunks {
	return &chunks{asm: consumers.NewAssembler(consumers.ReassemblyConfig{}), firsts: map[string]int64{}}
}

// add takes the next record of the partition and returns the record it
// completes, if any, and that record's first offset. Broken chunked
// records are dropped (the stages dead-letter them when they read them).
func (c *chunks) add(rec consumers.Record) (*consumers.Record, int64) {
	info, chunked, err := chunk.Parse(rec.Headers)
	if chunked && err == nil && info.Index == 0 {
		if len(c.firsts) >= maxOpenFirsts {
			clear(c.firsts)
		}
		c.firsts[info.Of] = rec.Offset
	}
	out, _ := c.asm.Add(rec)
	if out == nil {
		return nil, 0
	}
	if !chunked || err != nil {
		return out, out.Offset
	}
	first, ok := c.firsts[info.Of]
	delete(c.firsts, info.Of)
	if !ok {
		first = out.Offset
	}
	return out, first
}
