package state

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// Observe skips the scan of the open groups while none can have expired;
// it must expire exactly the groups a full scan of every open group does,
// in the same order, with event times that go backwards and forwards.
func TestObserveExpiresWhatAFullScanExpires(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		cfg := WindowConfig{TimeoutMs: 1000, MinGroupSize: 2, ClosedMemory: 64}
		g := NewGroups[int](cfg)
		open := map[string]Group[int]{} // the naive reference: prompt -> first event, first offset
		watermark := int64(0)
		for off := int64(0); off < 3000; off++ {
			ev := int64(r.IntN(20_000)) + off*5 // jittered, mostly rising event times
			watermark = max(watermark, ev)
			var want []string
			for p, grp := range open {
				if watermark-grp.FirstEventMs >= cfg.TimeoutMs {
					want = append(want, p)
				}
			}
			sort.Slice(want, func(i, j int) bool { return open[want[i]].FirstOffset < open[want[j]].FirstOffset })
			var got []string
			for _, e := range g.Observe(ev) {
				got = append(got, e.Group.PromptID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("seed %d offset %d: expired %v, a full scan expires %v", seed, off, got, want)
			}
			for _, p := range want {
				delete(open, p)
			}
			p := fmt.Sprintf("p%d", r.IntN(400))
			v, grp := g.Add(p, 4, Member[int]{TrajectoryID: fmt.Sprint(off), Offset: off, EventMs: ev})
			switch v {
			case Added:
				if _, ok := open[p]; !ok {
					open[p] = Group[int]{FirstEventMs: grp.FirstEventMs, FirstOffset: grp.FirstOffset}
				}
			case Completed:
				delete(open, p)
			}
			if g.Open() != len(open) {
				t.Fatalf("seed %d offset %d: %d open, reference %d", seed, off, g.Open(), len(open))
			}
		}
	}
}
