package state

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Phases of a close event: a group that expired before the record at Offset
// was added, or one that the record at Offset completed.
const (
	PhaseBefore = "before"
	PhaseAfter  = "after"
)

// CloseEvent is one group closing at an input position.
type CloseEvent struct {
	Offset      int64    `json:"offset"`
	Phase       string   `json:"phase"`
	FirstOffset int64    `json:"first_offset"`
	PromptID    string   `json:"prompt_id"`
	Members     []string `json:"members"`
	Finalized   bool     `json:"finalized"` // a batch (samples emitted, EMA updated); false: dead-lettered as incomplete
	BatchMean   float64  `json:"batch_mean"`
	EMAAfter    EMA      `json:"ema_after"` // the baseline once this event is applied

	acked bool
}

// Snapshot is a partition's state as of NextOffset: what a processor that
// starts reading at NextOffset needs to continue exactly like one that never
// stopped.
type Snapshot struct {
	Version     int           `json:"version"`
	Topic       string        `json:"topic"`
	Partition   int           `json:"partition"`
	NextOffset  int64         `json:"next_offset"`
	EMA         EMA           `json:"ema"`
	WatermarkMs int64         `json:"watermark_ms"`
	Closed      []ClosedGroup `json:"closed"`  // groups closed before NextOffset (bounded memory)
	Emitted     []CloseEvent  `json:"emitted"` // groups closed at or after NextOffset, already acknowledged
}

// SnapshotVersion is the version this package writes and reads.
const SnapshotVersion = 1

// SnapshotKey is the changelog key of a partition's snapshot.
func SnapshotKey(consumerGroup, topic string, partition int) string {
	return fmt.Sprintf("%s/%s/%d", consumerGroup, topic, partition)
}

// Marshal encodes a snapshot (JSON; deterministic).
func (s Snapshot) Marshal() ([]byte, error) { return json.Marshal(s) }

// UnmarshalSnapshot decodes a snapshot and checks its version.
func UnmarshalSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("state snapshot: %w (the changelog record is corrupt; delete the key to start the partition fresh)", err)
	}
	if s.Version != SnapshotVersion {
		return nil, fmt.Errorf("state snapshot: version %d, this build reads %d", s.Version, SnapshotVersion)
	}
	return &s, nil
}

// Ledger follows one input partition of the advantage stage between two
// commits: which offsets are in flight, which groups closed where, and the
// EMA and event-time watermark as of the committable offset. It turns that
// into a Snapshot and, after a restart, tells the processor which closes it
// must replay without emitting.
type Ledger struct {
	topic     string
	partition int
	wm        *Watermark

	baseEMA EMA // as of the last pruned position
	baseWM  int64
	reads   []readEntry   // offsets >= last pruned position, in order
	events  []*CloseEvent // closes at offsets >= last pruned position, in order

	replay map[int64][]CloseEvent // emitted before the restart, keyed by offset
}

type readEntry struct {
	offset, eventMs int64
}

// NewLedger starts a ledger at offset start, restoring snap when it is not nil.
// It returns the offset to resume at (snap.NextOffset when the snapshot is
// ahead of start) and the EMA and watermark to continue from.
func NewLedger(topic string, partition int, start int64, snap *Snapshot) (*Ledger, int64) {
	l := &Ledger{topic: topic, partition: partition, replay: map[int64][]CloseEvent{}}
	if snap != nil {
		if snap.NextOffset > start {
			start = snap.NextOffset
		}
		l.baseEMA, l.baseWM = snap.EMA, snap.WatermarkMs
		for _, e := range snap.Emitted {
			if e.Offset >= start {
				l.replay[e.Offset] = append(l.replay[e.Offset], e)
			}
		}
	}
	l.wm = NewWatermark(start)
	return l, start
}

// BaseEMA and BaseWatermark are the values restored from the snapshot.
func (l *Ledger) BaseEMA() EMA         { return l.baseEMA }
func (l *Ledger) BaseWatermark() int64 { return l.baseWM }

// Replays returns the closes, emitted before a restart, that happen at offset
// in the given phase, ordered by their first member's offset. The processor
// applies their EMA updates (BatchMean) in place of recomputing them and
// records them with Close(e, true). Each is returned once.
func (l *Ledger) Replays(offset int64, phase string) []CloseEvent {
	var out, keep []CloseEvent
	for _, e := range l.replay[offset] {
		if e.Phase == phase {
			out = append(out, e)
		} else {
			keep = append(keep, e)
		}
	}
	if len(keep) == 0 {
		delete(l.replay, offset)
	} else {
		l.replay[offset] = keep
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FirstOffset < out[j].FirstOffset })
	return out
}

// Read records that the record at offset (with event time eventMs) was read.
func (l *Ledger) Read(offset, eventMs int64) {
	l.wm.Read(offset)
	l.reads = append(l.reads, readEntry{offset, eventMs})
}

// Done marks offset finished (every output it caused is acknowledged).
func (l *Ledger) Done(offset int64) { l.wm.Done(offset) }

// Pending is the number of offsets in flight.
func (l *Ledger) Pending() int { return l.wm.Pending() }

// Committable is the next offset a restarted processor should read.
func (l *Ledger) Committable() int64 { return l.wm.Committable() }

// Close records a group closing. Replayed closes are recorded acknowledged.
func (l *Ledger) Close(e CloseEvent, acked bool) *CloseEvent {
	ev := e
	ev.acked = acked
	l.events = append(l.events, &ev)
	return &ev
}

// Ack marks a close's outputs acknowledged.
func (l *Ledger) Ack(e *CloseEvent) { e.acked = true }

// Snapshot prunes what lies before the committable offset and returns the
// state as of it. closed is the group table's remembered closed groups.
func (l *Ledger) Snapshot(closed []ClosedGroup) Snapshot {
	c := l.Committable()
	i := 0
	for ; i < len(l.reads) && l.reads[i].offset < c; i++ {
		if l.reads[i].eventMs > l.baseWM {
			l.baseWM = l.reads[i].eventMs
		}
	}
	l.reads = l.reads[i:]
	j := 0
	for ; j < len(l.events) && l.events[j].Offset < c; j++ {
		if l.events[j].Finalized {
			l.baseEMA = l.events[j].EMAAfter
		}
	}
	l.events = l.events[j:]
	for off := range l.replay {
		if off < c {
			delete(l.replay, off)
		}
	}

	s := Snapshot{Version: SnapshotVersion, Topic: l.topic, Partition: l.partition, NextOffset: c,
		EMA: l.baseEMA, WatermarkMs: l.baseWM, Closed: []ClosedGroup{}, Emitted: []CloseEvent{}}
	for _, evs := range l.replay { // restored, not yet reached
		s.Emitted = append(s.Emitted, evs...)
	}
	recompute := map[string]bool{}
	for _, e := range l.events {
		if e.acked {
			s.Emitted = append(s.Emitted, *e)
		} else {
			recompute[e.PromptID] = true
		}
	}
	sort.Slice(s.Emitted, func(i, j int) bool {
		a, b := s.Emitted[i], s.Emitted[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.FirstOffset < b.FirstOffset
	})
	emitted := map[string]bool{}
	for _, e := range s.Emitted {
		emitted[e.PromptID] = true
	}
	for _, g := range closed {
		if !recompute[g.PromptID] && !emitted[g.PromptID] {
			s.Closed = append(s.Closed, g)
		}
	}
	return s
}
