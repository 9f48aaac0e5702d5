package state

import (
	"fmt"
	"testing"
)

// BenchmarkPartitionHandle measures the core's own cost per record against
// the same groups and ledger driven by hand (the advantage stage before the
// core), in the same run: groups of 5 arriving interleaved in pairs, every
// group finalized, outputs acknowledged at once. The compute function is
// trivial, so what is measured is the bookkeeping; `-bench
// PartitionHandle` prints both and the ratio core/hand.
func BenchmarkPartitionHandle(b *testing.B) {
	const n, size = 10_000, 5
	type rec struct {
		prompt string
		m      Member[int]
	}
	recs := make([]rec, n)
	for i := range recs {
		g := (i/(2*size))*2 + i%2 // two groups interleaved at a time
		recs[i] = rec{fmt.Sprintf("p%06d", g), Member[int]{TrajectoryID: fmt.Sprintf("t%06d", i), Offset: int64(i), EventMs: int64(i), Value: i}}
	}
	compute := func(g *Group[int], _ bool, ema *EMA) (int, float64, error) {
		ema.Update(float64(len(g.Members)), 0.99)
		return len(g.Members), 1, nil
	}
	window := WindowConfig{TimeoutMs: 1 << 40, MinGroupSize: 2, ClosedMemory: 4096}
	var hand, core float64
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			groups, ledger := NewGroups[int](window), func() *Ledger { l, _ := NewLedger("t", 0, 0, nil); return l }()
			var ema EMA
			for _, r := range recs {
				ledger.Read(r.m.Offset, r.m.EventMs)
				groups.Observe(r.m.EventMs)
				if v, g := groups.Add(r.prompt, size, r.m); v == Completed {
					_, mean, _ := compute(g, false, &ema)
					ev := ledger.Close(CloseEvent{Offset: r.m.Offset, Phase: PhaseAfter, FirstOffset: g.FirstOffset, PromptID: g.PromptID,
						Members: memberIDs(g), Finalized: true, BatchMean: mean, EMAAfter: ema}, false)
					ledger.Ack(ev)
					for _, m := range g.Members {
						ledger.Done(m.Offset)
					}
				}
				ledger.Replays(r.m.Offset, PhaseBefore)
				ledger.Replays(r.m.Offset, PhaseAfter)
			}
		}
		hand = float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
		b.ReportMetric(hand, "ns/rec")
	})
	b.Run("core", func(b *testing.B) {
		for b.Loop() {
			p, _ := NewStream[int, int]("t", 0, 0, nil, window, compute)
			for _, r := range recs {
				for _, d := range p.Handle(r.prompt, size, r.m) {
					if d.Action == Finalize {
						p.Ack(d.Close)
						for _, m := range d.Group.Members {
							p.Done(m.Offset)
						}
					}
				}
			}
		}
		core = float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
		b.ReportMetric(core, "ns/rec")
		if hand > 0 {
			b.ReportMetric(core/hand, "core/hand")
		}
	})
}
