package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

func sample(traj, prompt string, size int32, version int64, reward float64) *schemas.Sample {
	return &schemas.Sample{TrajectoryID: traj, PromptID: prompt, GroupSize: size, PolicyVersion: version, Reward: reward,
		CreatedAtMs: 1_767_225_600_000, Method: "lapo", Output: "advantages",
		Tokens: make([]int32, 10), LossMask: []uint8{0, 0, 1, 1, 1, 0, 1, 1, 0, 0}, Advantages: make([]float32, 10)}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

func TestAggregatorKnownValues(t *testing.T) {
	a := NewAggregator(DefaultConfig(), "s")
	a.Add("s", sample("p1-0", "p1", 3, 2, 1), time.Time{})
	a.Add("s", sample("p1-1", "p1", 3, 2, 0), time.Time{})
	a.Add("s", sample("p1-1", "p1", 3, 2, 0), time.Time{}) // duplicate delivery
	a.Add("s", sample("p2-0", "p2", 2, 3, 0), time.Time{})
	a.Add("s", sample("p1-2", "p1", 3, 2, 0.5), time.Time{})
	a.Add("s", sample("p2-1", "p2", 2, 3, 0), time.Time{})
	if err := a.AddRecord("s", []byte("not a sample"), time.Time{}); err == nil {
		t.Fatal("junk decoded")
	}
	s := a.Summary()
	if s.Samples != 5 || s.Duplicates != 1 || s.Undecodable != 1 || s.Groups != 2 || s.ZeroVarianceGroups != 1 || s.PassGroups != 1 || s.OpenGroups != 0 {
		t.Fatalf("counts: %+v", s.Totals)
	}
	if !near(s.RewardMean, 1.5/5) || !near(s.SuccessRate, 1.0/5) || !near(s.PassAtG, 0.5) || !near(s.ZeroVarianceShare, 0.5) {
		t.Fatalf("means: %+v", s.Row)
	}
	if len(s.ByPolicyVersion) != 2 {
		t.Fatalf("rows %+v", s.ByPolicyVersion)
	}
	v2, v3 := s.ByPolicyVersion[0], s.ByPolicyVersion[1]
	if v2.PolicyVersion != 2 || v2.Samples != 3 || !near(v2.RewardMean, 0.5) || !near(v2.SuccessRate, 1.0/3) || v2.Groups != 1 || v2.ZeroVarianceGroups != 0 {
		t.Fatalf("version 2: %+v", v2)
	}
	if v3.PolicyVersion != 3 || v3.Samples != 2 || v3.RewardMean != 0 || v3.Groups != 1 || v3.ZeroVarianceGroups != 1 || v3.PassGroups != 0 {
		t.Fatalf("version 3: %+v", v3)
	}
	// Policy lag: p1-* arrived while 2 was the newest, except p1-2 (after 3).
	if !near(s.PolicyLagMean, 1.0/5) {
		t.Fatalf("policy lag mean %v", s.PolicyLagMean)
	}
	// Per-token advantages count policy tokens only: 5 per sample.
	v := a.View()
	if v.Charts[0].Advantage.Counts[30] != 25 || v.Charts[0].Tokens.Counts[0] != 5 {
		t.Fatalf("advantage hist %v", v.Charts[0].Advantage.Counts)
	}
}

func TestAggregatorSuccessThreshold(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SuccessThreshold = 0.5
	a := NewAggregator(cfg)
	for i, r := range []float64{0.49, 0.5, 0.9, 1} {
		a.Add("s", sample(fmt.Sprint(i), "p", 4, 0, r), time.Time{})
	}
	if s := a.Summary(); !near(s.SuccessRate, 0.75) || s.PassGroups != 1 {
		t.Fatalf("%+v", s.Row)
	}
}

func TestPartialGroupClosesWhenIdle(t *testing.T) {
	a := NewAggregator(DefaultConfig(), "s")
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	for i := 0; i < 2; i++ {
		s := sample(fmt.Sprint("t", i), "p", 5, 0, float64(i))
		s.Partial = true
		a.Add("s", s, time.Time{})
	}
	a.Sweep()
	if s := a.Summary(); s.Groups != 0 || s.OpenGroups != 1 {
		t.Fatalf("closed too early: %+v", s.Totals)
	}
	now = now.Add(DefaultConfig().GroupIdle)
	a.Sweep()
	if s := a.Summary(); s.Groups != 1 || s.PartialGroups != 1 || s.OpenGroups != 0 || s.ZeroVarianceGroups != 0 {
		t.Fatalf("after idle: %+v", s.Totals)
	}
}

func TestFinishClosesIncompleteGroups(t *testing.T) {
	a := NewAggregator(DefaultConfig(), "s")
	a.Add("s", sample("a", "p", 5, 0, 1), time.Time{})
	a.Add("s", sample("b", "p", 5, 0, 1), time.Time{})
	a.Finish()
	if s := a.Summary(); s.Groups != 1 || s.IncompleteGroups != 1 || s.ZeroVarianceGroups != 1 || s.PassGroups != 1 {
		t.Fatalf("%+v", s.Totals)
	}
}

func TestBounds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxVersions, cfg.MaxOpenGroups, cfg.DedupeWindow = 4, 10, 8
	a := NewAggregator(cfg, "s")
	for v := 0; v < 10; v++ {
		a.Add("s", sample(fmt.Sprint("v", v), fmt.Sprint("pv", v), 1, int64(v), 1), time.Time{})
	}
	a.Add("s", sample("old", "pold", 1, 0, 1), time.Time{})
	s := a.Summary()
	if len(s.ByPolicyVersion) != 4 || s.ByPolicyVersion[0].PolicyVersion != 6 || s.DroppedVersionSamples != 7 || s.Samples != 11 {
		t.Fatalf("version rows: %+v dropped %d", s.ByPolicyVersion, s.DroppedVersionSamples)
	}
	// 100 groups that never complete: at most 10 stay open.
	for g := 0; g < 100; g++ {
		a.Add("s", sample(fmt.Sprint("g", g), fmt.Sprint("open", g), 3, 9, 0), time.Time{})
	}
	s = a.Summary()
	if s.OpenGroups != 10 || s.IncompleteGroups != 90 {
		t.Fatalf("open %d incomplete %d", s.OpenGroups, s.IncompleteGroups)
	}
	tg := a.byName["s"]
	if len(tg.seen.set) != 8 || len(tg.open.queue)-tg.open.head > 2*10+16 {
		t.Fatalf("dedupe set %d, queue %d", len(tg.seen.set), len(tg.open.queue)-tg.open.head)
	}
	// An id older than the window is forgotten: counted again.
	a.Add("s", sample("v0", "again", 1, 9, 0), time.Time{})
	if s := a.Summary(); s.Duplicates != 0 || s.Samples != 112 {
		t.Fatalf("%+v", s.Totals)
	}
}

// TestEventSeriesAgainstNaive feeds random event times spanning from
// milliseconds to years and checks every bucket against a direct count with
// the final grid.
func TestEventSeriesAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, spanMs := range []int64{50, 5_000, 3_600_000, 400 * 86_400_000} {
		s := newEventSeries()
		type ev struct {
			t int64
			r float64
		}
		var evs []ev
		base := int64(1_767_225_600_000)
		for i := 0; i < 5000; i++ {
			e := ev{base + r.Int64N(spanMs) - spanMs/3, float64(r.IntN(3)) / 2}
			evs = append(evs, e)
			b := s.bucket(e.t)
			b.n++
			b.rewardSum += e.r
		}
		if len(s.buckets) != seriesBuckets {
			t.Fatalf("bucket count %d", len(s.buckets))
		}
		naive := map[int64]*eventBucket{}
		for _, e := range evs {
			k := (e.t - s.origin) / s.width
			if k < 0 || k >= seriesBuckets {
				t.Fatalf("span %d: event %d outside the final grid [%d, +%d×%d)", spanMs, e.t, s.origin, seriesBuckets, s.width)
			}
			if naive[k] == nil {
				naive[k] = &eventBucket{}
			}
			naive[k].n++
			naive[k].rewardSum += e.r
		}
		for k := range s.buckets {
			b, n := s.buckets[k], naive[int64(k)]
			if n == nil {
				n = &eventBucket{}
			}
			if b.n != n.n || math.Abs(b.rewardSum-n.rewardSum) > 1e-9 {
				t.Fatalf("span %d bucket %d: %+v, naive %+v", spanMs, k, b, *n)
			}
		}
		// The finest width that fits: half of it would not.
		if s.width > seriesMinMs && spanMs < (s.width/2)*(seriesBuckets-2) {
			t.Fatalf("span %d ms: width %d ms is coarser than needed", spanMs, s.width)
		}
	}
}

func TestRateRing(t *testing.T) {
	r := newRateRing(5)
	for _, s := range []int64{100, 100, 101, 103, 103, 103} {
		r.add(s)
	}
	v := r.view(104)
	want := []int64{2, 1, 0, 3} // seconds 100..103; 104 is still filling
	if fmt.Sprint(v.Counts) != fmt.Sprint(want) || v.T[0] != 100 {
		t.Fatalf("%+v", v)
	}
	if v := r.view(200); fmt.Sprint(v.Counts) != "[0 0 0 0]" {
		t.Fatalf("after a pause: %+v", v)
	}
}

func TestSeveralTopics(t *testing.T) {
	a := NewAggregator(DefaultConfig(), "live", "replay")
	for _, topic := range []string{"live", "replay"} {
		for i := 0; i < 4; i++ {
			r := 0.0
			if topic == "live" && i == 0 {
				r = 1
			}
			a.Add(topic, sample(fmt.Sprint(i), "p", 4, 1, r), time.Time{})
		}
	}
	a.AddDeadLetter([]byte("junk"), "late")
	a.AddDeadLetter([]byte("junk"), "")
	s := a.Summary()
	if s.Samples != 8 || s.Groups != 2 || s.ZeroVarianceGroups != 1 || !near(s.RewardMean, 1.0/8) || len(s.ByPolicyVersion) != 1 || s.ByPolicyVersion[0].Groups != 2 {
		t.Fatalf("all: %+v", s.Totals)
	}
	if l, rp := s.Topics["live"], s.Topics["replay"]; l.Samples != 4 || rp.Samples != 4 || l.ZeroVarianceGroups != 0 || rp.ZeroVarianceGroups != 1 {
		t.Fatalf("topics %+v", s.Topics)
	}
	if fmt.Sprint(s.TopicOrder) != "[live replay]" || s.DeadLetters["late"] != 1 || s.DeadLetters["undecodable_dead_letter"] != 1 || s.DeadLettersTotal != 2 {
		t.Fatalf("%v %v", s.TopicOrder, s.DeadLetters)
	}
}

func TestHistogram(t *testing.T) {
	h := newHist(0, 1, 4, false)
	for _, x := range []float64{-1, 0, 0.25, 0.49, 0.999, 1, 1.01, math.NaN()} {
		h.add(x)
	}
	if fmt.Sprint(h.counts) != "[1 2 0 2]" || h.under != 1 || h.over != 1 || h.n != 7 {
		t.Fatalf("%v under %d over %d n %d", h.counts, h.under, h.over, h.n)
	}
	l := newHist(1, 1000, 3, true)
	l.add(5)
	l.add(50)
	l.add(999)
	if fmt.Sprint(l.counts) != "[1 1 1]" || math.Abs(l.edges()[1]-10) > 1e-9 {
		t.Fatalf("log: %v %v", l.counts, l.edges())
	}
}

func TestBySourceAndScorerLag(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSources = 4 // three named rows and "other"
	a := NewAggregator(cfg, "s")
	add := func(id, prompt, source string, reward float64, scorer *int64) {
		s := sample(id, prompt, 2, 5, reward)
		if source != "" {
			s.Source = &source
		}
		s.ScorerPolicyVersion = scorer
		a.Add("s", s, time.Time{})
	}
	v6, v5, unknown := int64(6), int64(5), int64(-1)
	add("a0", "pa", "nq", 1, &v6)
	add("a1", "pa", "nq", 0, &v6)
	add("b0", "pb", "hotpotqa", 1, &v5)
	add("b1", "pb", "hotpotqa", 1, nil)
	add("c0", "pc", "", 0, &unknown) // a scorer that does not know its version: no lag
	add("c1", "pc", "", 0, nil)
	add("d0", "pd", "trivia", 0, nil) // a fourth source: "other"
	add("d1", "pd", "trivia", 1, nil)
	s := a.Summary()
	got := map[string]SourceRow{}
	for _, r := range s.BySource {
		got[r.Source] = r
	}
	if len(s.BySource) != 4 || s.BySource[0].Source != NoSource || got["other"].Samples != 2 || got["other"].Groups != 1 || got["nq"].Samples != 2 || !near(got["nq"].RewardMean, 0.5) ||
		got["hotpotqa"].ZeroVarianceGroups != 1 || got[NoSource].Groups != 1 || got[NoSource].ZeroVarianceGroups != 1 {
		t.Fatalf("by source: %+v", s.BySource)
	}
	if _, ok := got["trivia"]; ok {
		t.Fatalf("a fourth named row: %+v", s.BySource)
	}
	if s.ScorerLagSamples != 3 || !near(s.ScorerLagMean, 2.0/3) {
		t.Fatalf("scorer lag: %d samples, mean %v", s.ScorerLagSamples, s.ScorerLagMean)
	}
}
