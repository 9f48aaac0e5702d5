package monitor

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

func ptrf(v float64) *float64 { return &v }

// TestKeptLists feeds random rewards and process credits and checks every
// list against a naive sort of everything fed; memory stays at KeepSamples
// refs per list and KeepIDs ids.
func TestKeptLists(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeepSamples, cfg.KeepIDs = 7, 50
	a := NewAggregator(cfg, "s")
	r := rand.New(rand.NewSource(3))
	type fed struct {
		id      string
		reward  float64
		process *float64
		seq     int
	}
	var all []fed
	for i := 0; i < 300; i++ {
		s := sample(fmt.Sprint("t", i), fmt.Sprint("p", i), 1, 0, float64(r.Intn(11))/10) // many ties
		f := fed{id: s.TrajectoryID, reward: s.Reward, seq: i}
		if i%3 != 0 { // a third carry no process credit
			a1, a2 := r.NormFloat64(), r.NormFloat64()
			s.Turns = []schemas.TurnDiag{{Kind: "search", Eligible: true, Delta: ptrf(1), ProcessAdvantage: a1}, {Kind: "answer", StepReward: ptrf(a2)}}
			f.process = ptrf(a1 + a2)
		}
		a.AddAt("s", i%2, int64(i/2), s, time.Time{})
		a.AddAt("s", i%2, int64(i/2), s, time.Time{}) // a duplicate is kept once
		all = append(all, f)
	}
	check := func(order, by string, want []fed) {
		t.Helper()
		got := a.Samples("s", order, by, 100)
		if len(got) != min(len(want), 7) {
			t.Fatalf("%s by %s: %d refs, want %d", order, by, len(got), min(len(want), 7))
		}
		for i := range got {
			if got[i].TrajectoryID != want[i].id {
				t.Fatalf("%s by %s: #%d is %s (reward %v), want %s (reward %v)", order, by, i, got[i].TrajectoryID, got[i].Reward, want[i].id, want[i].reward)
			}
		}
	}
	sorted := func(key func(f fed) (float64, bool), high bool) []fed {
		var out []fed
		for _, f := range all {
			if _, ok := key(f); ok {
				out = append(out, f)
			}
		}
		sort.SliceStable(out, func(i, j int) bool {
			ki, _ := key(out[i])
			kj, _ := key(out[j])
			if high {
				return ki > kj
			}
			return ki < kj
		})
		return out
	}
	rk := func(f fed) (float64, bool) { return f.reward, true }
	pk := func(f fed) (float64, bool) {
		if f.process == nil {
			return 0, false
		}
		return *f.process, true
	}
	check(OrderBest, ByReward, sorted(rk, true))
	check(OrderWorst, ByReward, sorted(rk, false))
	check(OrderBest, ByProcess, sorted(pk, true))
	check(OrderWorst, ByProcess, sorted(pk, false))
	recent := make([]fed, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		recent = append(recent, all[i])
	}
	check(OrderRecent, ByReward, recent)
	if got := a.Samples("s", OrderBest, ByReward, 2); len(got) != 2 {
		t.Fatalf("limit 2: %d refs", len(got))
	}

	// Locations: the last KeepIDs ids are remembered, older ones forgotten.
	if p, off, ok := a.Locate("s", "t299"); !ok || p != 1 || off != 149 {
		t.Fatalf("t299 at %d/%d %v", p, off, ok)
	}
	if _, _, ok := a.Locate("s", "t249"); ok {
		t.Fatal("t249 is older than the last 50 ids and still located")
	}
	if _, _, ok := a.Locate("s", "t250"); !ok {
		t.Fatal("t250 is among the last 50 ids and not located")
	}
	if k := a.byName["s"].kept; len(k.index) != 50 || len(k.recent) != 7 || len(k.best[0].refs) != 7 {
		t.Fatalf("kept %d ids, %d recent, %d best", len(k.index), len(k.recent), len(k.best[0].refs))
	}
}

// TestKeptAcrossTopics merges the lists of two topics.
func TestKeptAcrossTopics(t *testing.T) {
	a := NewAggregator(DefaultConfig(), "a", "b")
	a.AddAt("a", 0, 0, sample("x", "p", 1, 0, 0.2), time.Time{})
	a.AddAt("b", 0, 0, sample("y", "p", 1, 0, 0.9), time.Time{})
	a.AddAt("a", 0, 1, sample("z", "p", 1, 0, 0.5), time.Time{})
	ids := func(refs []SampleRef) (s string) {
		for _, r := range refs {
			s += r.Topic + ":" + r.TrajectoryID + " "
		}
		return s
	}
	if got := ids(a.Samples("", OrderBest, ByReward, 10)); got != "b:y a:z a:x " {
		t.Fatalf("best over both topics: %s", got)
	}
	if got := ids(a.Samples("", OrderRecent, ByReward, 2)); got != "a:z b:y " {
		t.Fatalf("recent over both topics: %s", got)
	}
	if got := ids(a.Samples("a", OrderWorst, ByReward, 10)); got != "a:x a:z " {
		t.Fatalf("worst of a: %s", got)
	}
}

// TestSegment lays out known token sequences.
func TestSegment(t *testing.T) {
	f := func(v float64) float32 { return float32(v) }
	// prompt 3 | turn 0: action 2, observation 2 | turn 1: action 2 (no
	// observation) | turn 2: action 3, observation 1.
	s := &schemas.Sample{Output: "advantages",
		LossMask: []uint8{0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0},
		Turns:    []schemas.TurnDiag{{Advantage: 0.5}, {Advantage: -0.25}, {Advantage: 1.5}}}
	s.Advantages = []float32{0, 0, 0, f(0.5), f(0.5), 0, 0, f(-0.25), f(-0.25), f(1.5), f(1.5), f(1.5), 0}
	pe, turns, exact := segment(s)
	want := [][4]int{{3, 5, 5, 7}, {7, 9, 9, 9}, {9, 12, 12, 13}}
	if pe != 3 || !exact {
		t.Fatalf("prompt end %d, exact %v", pe, exact)
	}
	for k, w := range want {
		if got := [4]int{turns[k].Action[0], turns[k].Action[1], turns[k].Observation[0], turns[k].Observation[1]}; got != w {
			t.Fatalf("turn %d: %v, want %v", k, got, w)
		}
	}
	// Equal advantages on the touching turns: the boundary cannot be found.
	s.Turns[1].Advantage = 1.5
	for i := 7; i < 9; i++ {
		s.Advantages[i] = f(1.5)
	}
	if _, _, exact := segment(s); exact {
		t.Fatal("indistinguishable turns reported exact")
	}
	// Token rewards (AttnSR ppo) are not split by value; one observation per turn is exact.
	ppo := &schemas.Sample{Output: "token_rewards", LossMask: []uint8{0, 1, 0, 1, 1, 0, 0}, Turns: make([]schemas.TurnDiag, 2)}
	pe, turns, exact = segment(ppo)
	if pe != 1 || !exact || turns[1].Action != [2]int{3, 5} || turns[1].Observation != [2]int{5, 7} {
		t.Fatalf("ppo: %d %v %+v", pe, exact, turns)
	}
}
