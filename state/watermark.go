package state

import "sort"

// Watermark tracks the offsets of one input partition from the moment they
// are read until every output they caused is acknowledged, and tells which
// offset may be committed: the smallest offset still pending, or one past the
// last offset seen when nothing is pending.
//
// A Watermark is not safe for concurrent use; the partition's goroutine owns it.
type Watermark struct {
	next    int64          // committable when nothing is pending: one past the highest offset seen
	pending map[int64]bool // offsets read but not yet done
	min     int64          // cached smallest pending offset (valid when minOK)
	minOK   bool
}

// NewWatermark starts a watermark at the partition's start offset.
func NewWatermark(start int64) *Watermark {
	return &Watermark{next: start, pending: map[int64]bool{}}
}

// Read records that offset was read and is now in flight. Offsets must be read
// in increasing order.
func (w *Watermark) Read(offset int64) {
	w.pending[offset] = true
	if offset+1 > w.next {
		w.next = offset + 1
	}
	if w.minOK && offset < w.min {
		w.min = offset
	}
}

// Done marks offset as finished: everything it caused is acknowledged.
// Marking an offset that is not pending is a no-op.
func (w *Watermark) Done(offset int64) {
	if !w.pending[offset] {
		return
	}
	delete(w.pending, offset)
	if w.minOK && offset == w.min {
		w.minOK = false
	}
}

// Pending is the number of offsets in flight.
func (w *Watermark) Pending() int { return len(w.pending) }

// Committable is the offset to commit (the next offset a restarted consumer
// should read).
func (w *Watermark) Committable() int64 {
	if len(w.pending) == 0 {
		return w.next
	}
	if !w.minOK {
		first := true
		for o := range w.pending {
			if first || o < w.min {
				w.min, first = o, false
			}
		}
		w.minOK = true
	}
	return w.min
}

// PendingOffsets lists the offsets in flight in increasing order (for tests and diagnostics).
func (w *Watermark) PendingOffsets() []int64 {
	out := make([]int64, 0, len(w.pending))
	for o := range w.pending {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
