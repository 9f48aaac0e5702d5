package state

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// meanCompute is a Compute for tests: the result is the group's member
// ids, the batch mean the mean of the values, and the EMA one update with
// δ = 0.5. A group whose prompt is "bad" is refused.
func meanCompute(g *Group[float64], _ bool, ema *EMA) ([]string, float64, error) {
	ids := make([]string, len(g.Members))
	sum := 0.0
	for i, m := range g.Members {
		ids[i], sum = m.TrajectoryID, sum+m.Value
	}
	mean := sum / float64(len(ids))
	ema.Update(mean, 0.5)
	if g.PromptID == "bad" {
		return ids, 0, errors.New("refused")
	}
	return ids, mean, nil
}

// trace renders decisions as "action:prompt@offset".
func trace(ds []Decision[float64, []string]) []string {
	var out []string
	for _, d := range ds {
		p := ""
		if d.Group != nil {
			p = d.Group.PromptID
		} else if d.Close != nil {
			p = d.Close.PromptID
		} else {
			p = d.Member.TrajectoryID
		}
		out = append(out, fmt.Sprintf("%s:%s@%d", d.Action, p, d.Offset))
	}
	return out
}

func member(id string, off, ev int64, v float64) Member[float64] {
	return Member[float64]{TrajectoryID: id, Offset: off, EventMs: ev, Value: v}
}

// The stream core turns members and idle ticks into the decisions the
// advantage stage acts on, in order, and keeps the EMA and ledger with them.
func TestStreamPartitionDecisions(t *testing.T) {
	p, resume := NewStream[float64, []string]("scored", 0, 0, nil, WindowConfig{TimeoutMs: 100, MinGroupSize: 2, ClosedMemory: 16}, meanCompute)
	if resume != 0 {
		t.Fatalf("resume %d", resume)
	}
	steps := []struct {
		prompt string
		size   int
		m      Member[float64]
		want   []string
	}{
		{"a", 2, member("a0", 0, 1000, 1), []string{"hold:a@0"}},
		{"b", 3, member("b0", 1, 1010, 0), []string{"hold:b@1"}},
		{"b", 3, member("b1", 2, 1020, 1), []string{"hold:b@2"}},
		{"c", 3, member("c0", 3, 1030, 0), []string{"hold:c@3"}},
		{"a", 2, member("a0", 4, 1040, 1), []string{"duplicate:a0@4"}},
		{"c", 2, member("c1", 5, 1050, 1), []string{"group_size_mismatch:c@5"}},
		{"a", 2, member("a1", 6, 1060, 0), []string{"finalize:a@6"}},
		{"a", 2, member("a2", 7, 1070, 0), []string{"late:a2@7"}},
		// event time 1110 expires b (first event 1010, 2 members: partial)
		// before this record joins; c (1 member) stays open until 1130.
		{"d", 1, member("d0", 8, 1110, 1), []string{"finalize:b@8", "finalize:d@8"}},
		{"e", 2, member("e0", 9, 1130, 1), []string{"incomplete:c@9", "hold:e@9"}},
	}
	for i, s := range steps {
		got := trace(p.Handle(s.prompt, s.size, s.m))
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: decisions %v, want %v", i, got, s.want)
		}
	}
	// EMA: a (mean 0.5), b (0.5), d (1): 0.5, 0.5, 0.75.
	if ema := p.EMA(); ema != (EMA{Value: 0.75, Count: 3}) {
		t.Fatalf("EMA %+v, want 0.75 after 3 batches", ema)
	}
	// The refused group leaves the baseline as it was.
	got := trace(p.Handle("bad", 1, member("x0", 10, 1130, 5)))
	if !reflect.DeepEqual(got, []string{"refused:bad@10"}) || p.EMA() != (EMA{Value: 0.75, Count: 3}) {
		t.Fatalf("refused group: %v, EMA %+v", got, p.EMA())
	}
	// Idle: e's window closes by processing time at the next offset.
	if got := trace(p.Idle(10)); got != nil {
		t.Fatalf("10 ms idle: %v", got)
	}
	if got := trace(p.Idle(100)); !reflect.DeepEqual(got, []string{"incomplete:e@11"}) {
		t.Fatalf("idle: %v, want e incomplete at the next offset", got)
	}
	if p.Open() != 0 || p.Next() != 11 {
		t.Fatalf("open %d next %d", p.Open(), p.Next())
	}
	// Only the duplicate is done: nothing is committable yet.
	if c := p.Committable(); c != 0 {
		t.Fatalf("committable %d, want 0", c)
	}
}

// A restarted core replays the closes its snapshot says were emitted
// (applying their EMA, writing nothing) and decides everything else as the
// core that never stopped did.
func TestStreamPartitionReplaysLikeTheUninterrupted(t *testing.T) {
	window := WindowConfig{TimeoutMs: 100, MinGroupSize: 2, ClosedMemory: 16}
	in := []struct {
		prompt string
		m      Member[float64]
	}{
		{"a", member("a0", 0, 1000, 1)}, {"b", member("b0", 1, 1001, 0)}, {"a", member("a1", 2, 1002, 0)},
		{"b", member("b1", 3, 1003, 1)}, {"c", member("c0", 4, 1004, 1)}, {"c", member("c1", 5, 1005, 1)},
	}
	run := func(p *Partition[float64, []string], from int) []string {
		var out []string
		for _, r := range in[from:] {
			ds := p.Handle(r.prompt, 2, r.m)
			out = append(out, trace(ds)...)
			for _, d := range ds {
				if d.Close != nil {
					p.Ack(d.Close)
				}
				if d.Action == Finalize {
					for _, m := range d.Group.Members {
						p.Done(m.Offset)
					}
				}
			}
		}
		return out
	}
	ref, _ := NewStream[float64, []string]("scored", 0, 0, nil, window, meanCompute)
	all := run(ref, 0)

	// Restart after b closed (offset 3): a's and b's samples acknowledged,
	// but b's offsets not yet marked done, so offset 1 is not committable
	// and both closes lie ahead of the snapshot's position.
	first, _ := NewStream[float64, []string]("scored", 0, 0, nil, window, meanCompute)
	for _, r := range in[:4] {
		for _, d := range first.Handle(r.prompt, 2, r.m) {
			if d.Close != nil {
				first.Ack(d.Close)
			}
			if d.Action == Finalize && d.Group.PromptID == "a" {
				first.Done(0)
				first.Done(2)
			}
		}
	}
	snap := first.Snapshot()
	if snap.NextOffset != 1 || len(snap.Emitted) != 2 || snap.Emitted[0].PromptID != "a" || snap.Emitted[1].PromptID != "b" {
		t.Fatalf("snapshot %+v: want next offset 1 and a, b emitted ahead", snap)
	}
	again, resume := NewStream[float64, []string]("scored", 0, 1, &snap, window, meanCompute)
	if resume != 1 {
		t.Fatalf("resume %d", resume)
	}
	got := run(again, 1)
	// Members of groups emitted ahead are duplicates; the closes replay
	// where they happened.
	want := []string{"duplicate:b0@1", "duplicate:a1@2", "replayed:a@2", "duplicate:b1@3", "replayed:b@3"}
	want = append(want, all[len(all)-2:]...) // c as before
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart %v, want %v (uninterrupted: %v)", got, want, all)
	}
	if again.EMA() != ref.EMA() {
		t.Fatalf("EMA after restart %+v, uninterrupted %+v", again.EMA(), ref.EMA())
	}
}

// The batch core (compute) has no window: a group closes when complete or
// at End, partial, in first-member order; a closed group's members are
// always late.
func TestBatchPartition(t *testing.T) {
	p := NewBatch[float64, []string](meanCompute)
	var got []string
	for _, r := range []struct {
		prompt string
		size   int
		m      Member[float64]
	}{
		{"b", 3, member("b0", 1, 0, 1)}, {"a", 2, member("a0", 2, 0, 1)}, {"c", 2, member("c0", 3, 1<<60, 1)},
		{"a", 2, member("a1", 4, 0, 1)}, {"a", 2, member("a2", 5, 0, 1)}, {"c", 3, member("c1", 6, 0, 1)},
	} {
		got = append(got, trace(p.Handle(r.prompt, r.size, r.m))...)
	}
	got = append(got, trace(p.End())...)
	want := []string{"hold:b@1", "hold:a@2", "hold:c@3", "finalize:a@4", "late:a2@5", "group_size_mismatch:c@6", "finalize:b@7", "finalize:c@7"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
}
