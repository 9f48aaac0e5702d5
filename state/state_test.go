package state

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestWatermarkCommitsOnlyContiguousDone(t *testing.T) {
	w := NewWatermark(10)
	if got := w.Committable(); got != 10 {
		t.Fatalf("empty watermark at 10: committable %d", got)
	}
	for o := int64(10); o < 15; o++ {
		w.Read(o)
	}
	w.Done(11)
	w.Done(13)
	if got := w.Committable(); got != 10 {
		t.Fatalf("10 still pending: committable %d, want 10", got)
	}
	w.Done(10)
	if got := w.Committable(); got != 12 {
		t.Fatalf("10, 11 done: committable %d, want 12", got)
	}
	w.Done(12)
	w.Done(14)
	if got := w.Committable(); got != 15 {
		t.Fatalf("all done: committable %d, want 15", got)
	}
	w.Done(14) // twice: no effect
	if w.Pending() != 0 {
		t.Fatalf("pending %d", w.Pending())
	}
}

func TestWatermarkRandomOrderNeverPassesPending(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	w := NewWatermark(0)
	done := map[int64]bool{}
	var next int64
	for step := 0; step < 5000; step++ {
		if r.IntN(2) == 0 || next < 5 {
			w.Read(next)
			next++
		} else {
			o := r.Int64N(next)
			w.Done(o)
			done[o] = true
		}
		c := w.Committable()
		for o := int64(0); o < c; o++ {
			if !done[o] {
				t.Fatalf("step %d: committable %d passes pending offset %d", step, c, o)
			}
		}
		if c < next && done[c] {
			t.Fatalf("step %d: committable %d is done already", step, c)
		}
	}
}

func add(g *Groups[int], prompt string, size int, tid string, off, ev int64) (Verdict, *Group[int]) {
	return g.Add(prompt, size, Member[int]{TrajectoryID: tid, Offset: off, EventMs: ev})
}

func TestGroupsCompleteDuplicateLateMismatch(t *testing.T) {
	g := NewGroups[int](DefaultWindow())
	for i, tid := range []string{"a", "b"} {
		if v, _ := add(g, "p", 3, tid, int64(i), 0); v != Added {
			t.Fatalf("member %s: %v", tid, v)
		}
	}
	if v, _ := add(g, "p", 3, "a", 2, 0); v != Duplicate {
		t.Fatalf("repeated a: %v, want duplicate", v)
	}
	if v, _ := add(g, "p", 4, "x", 3, 0); v != SizeMismatch {
		t.Fatalf("group size 4 vs 3: %v", v)
	}
	v, grp := add(g, "p", 3, "c", 4, 0)
	if v != Completed || len(grp.Members) != 3 || g.Open() != 0 {
		t.Fatalf("third member: %v, %d members, %d open", v, len(grp.Members), g.Open())
	}
	if v, _ := add(g, "p", 3, "b", 5, 0); v != Duplicate {
		t.Fatalf("emitted member again: %v, want duplicate", v)
	}
	if v, _ := add(g, "p", 3, "d", 6, 0); v != Late {
		t.Fatalf("new member after close: %v, want late", v)
	}
}

func TestGroupsExpireOnEventTime(t *testing.T) {
	g := NewGroups[int](WindowConfig{TimeoutMs: 100, MinGroupSize: 2, ClosedMemory: 10})
	g.Observe(0)
	add(g, "small", 5, "s1", 0, 0)
	g.Observe(10)
	add(g, "big", 5, "b1", 1, 10)
	add(g, "big", 5, "b2", 2, 20)
	if exp := g.Observe(99); len(exp) != 0 {
		t.Fatalf("expired at 99: %d groups", len(exp))
	}
	exp := g.Observe(110) // small (first 0) and big (first 10) are both due
	if len(exp) != 2 || exp[0].Group.PromptID != "small" || exp[1].Group.PromptID != "big" {
		t.Fatalf("expired %+v, want small then big (first-offset order)", exp)
	}
	if exp[0].Partial || !exp[1].Partial {
		t.Fatalf("small (1 member) must be incomplete, big (2 members) partial: %v %v", exp[0].Partial, exp[1].Partial)
	}
	if v, _ := add(g, "big", 5, "b3", 3, 111); v != Late {
		t.Fatalf("member after expiry: %v, want late", v)
	}
	// The watermark never moves back.
	g.Observe(5)
	if g.Watermark() != 110 {
		t.Fatalf("watermark %d, want 110", g.Watermark())
	}
}

func TestGroupsClosedMemoryIsBounded(t *testing.T) {
	g := NewGroups[int](WindowConfig{TimeoutMs: 1000, MinGroupSize: 1, ClosedMemory: 3})
	for i := 0; i < 5; i++ {
		add(g, string(rune('a'+i)), 1, "t", int64(i), 0)
	}
	closed := g.Closed()
	if len(closed) != 3 || closed[0].PromptID != "c" || closed[2].PromptID != "e" {
		t.Fatalf("closed memory %+v, want c, d, e", closed)
	}
	if g.IsClosed("a") {
		t.Fatal("a should have been forgotten")
	}
}

func TestLedgerSnapshotKeepsOnlyAckedClosesAhead(t *testing.T) {
	l, start := NewLedger("scored", 0, 0, nil)
	if start != 0 {
		t.Fatalf("start %d", start)
	}
	// Offsets 0..5: group A = {0, 2, 4} closes at 4 (acked); group B = {1, 3} open; 5 is a dead letter, acked.
	for o := int64(0); o < 6; o++ {
		l.Read(o, 1000+o)
	}
	a := l.Close(CloseEvent{Offset: 4, Phase: PhaseAfter, FirstOffset: 0, PromptID: "A", Members: []string{"a0", "a2", "a4"},
		Finalized: true, BatchMean: 0.5, EMAAfter: EMA{Value: 0.5, Count: 1}}, false)
	l.Ack(a)
	for _, o := range []int64{0, 2, 4, 5} {
		l.Done(o)
	}
	snap := l.Snapshot([]ClosedGroup{{PromptID: "old", Members: []string{"x"}}, {PromptID: "A", Members: []string{"a0", "a2", "a4"}}})
	if snap.NextOffset != 1 {
		t.Fatalf("next offset %d, want 1 (B's first member)", snap.NextOffset)
	}
	if snap.EMA.Count != 0 || snap.WatermarkMs != 1000 {
		t.Fatalf("state as of offset 1: ema %+v watermark %d, want no batch and 1000", snap.EMA, snap.WatermarkMs)
	}
	if len(snap.Emitted) != 1 || snap.Emitted[0].PromptID != "A" {
		t.Fatalf("emitted %+v, want A (closed at 4 >= 1, acked)", snap.Emitted)
	}
	if len(snap.Closed) != 1 || snap.Closed[0].PromptID != "old" {
		t.Fatalf("closed %+v, want only old (A travels as emitted)", snap.Closed)
	}

	// Restart from the snapshot: A's close is replayed at offset 4, once.
	b, err := snap.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	l2, resume := NewLedger("scored", 0, 0, back)
	if resume != 1 {
		t.Fatalf("resume %d, want 1", resume)
	}
	if r := l2.Replays(4, PhaseBefore); len(r) != 0 {
		t.Fatalf("phase before at 4: %+v", r)
	}
	// Not yet reached: a snapshot still carries it.
	if s := l2.Snapshot(nil); len(s.Emitted) != 1 || s.NextOffset != 1 {
		t.Fatalf("snapshot before reaching 4: %+v", s)
	}
	r := l2.Replays(4, PhaseAfter)
	if len(r) != 1 || !reflect.DeepEqual(r[0].Members, []string{"a0", "a2", "a4"}) || r[0].EMAAfter.Count != 1 {
		t.Fatalf("replay at 4: %+v", r)
	}
	if again := l2.Replays(4, PhaseAfter); len(again) != 0 {
		t.Fatalf("replayed twice: %+v", again)
	}
	// Once everything up to 6 is done the EMA folds into the base.
	for o := int64(1); o < 6; o++ {
		l2.Read(o, 1000+o)
	}
	l2.Close(r[0], true)
	for o := int64(1); o < 6; o++ {
		l2.Done(o)
	}
	s := l2.Snapshot(nil)
	if s.NextOffset != 6 || s.EMA != (EMA{Value: 0.5, Count: 1}) || len(s.Emitted) != 0 || s.WatermarkMs != 1005 {
		t.Fatalf("final snapshot %+v", s)
	}
}

func TestLedgerUnackedCloseIsRecomputed(t *testing.T) {
	l, _ := NewLedger("scored", 3, 0, nil)
	l.Read(0, 1)
	l.Read(1, 2)
	l.Close(CloseEvent{Offset: 1, Phase: PhaseAfter, FirstOffset: 0, PromptID: "A", Members: []string{"x", "y"}, Finalized: true,
		EMAAfter: EMA{Value: 1, Count: 1}}, false)
	s := l.Snapshot([]ClosedGroup{{PromptID: "A", Members: []string{"x", "y"}}})
	if s.NextOffset != 0 || len(s.Emitted) != 0 || len(s.Closed) != 0 || s.EMA.Count != 0 {
		t.Fatalf("unacked close must leave no trace: %+v", s)
	}
}

func TestSnapshotVersionChecked(t *testing.T) {
	if _, err := UnmarshalSnapshot([]byte(`{"version":99}`)); err == nil {
		t.Fatal("version 99 accepted")
	}
	if _, err := UnmarshalSnapshot([]byte(`{`)); err == nil {
		t.Fatal("corrupt snapshot accepted")
	}
}
