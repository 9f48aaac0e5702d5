package monitor

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/schemas"
)

// searchQASample is a sample of the search-QA shape (≈ 1.3k tokens, 2–4
// turns, LAPO diagnostics) built from the synthetic workload, with
// fixed-width ids so that a benchmark can renumber its encoded bytes.
func searchQASample(k int) *schemas.Sample {
	g := synth.Default()
	tr := g.Trajectory(k/5, k%5)
	s := &schemas.Sample{TrajectoryID: fmt.Sprintf("t%012d", k), PromptID: fmt.Sprintf("p%011d", k/5), GroupSize: 5,
		SampleIndex: int32(k % 5), PolicyVersion: int64(k / 5000), CreatedAtMs: tr.CreatedAtMs, Method: "lapo", Output: "advantages",
		Reward: float64(k%3) / 2, OutcomeAdvantage: float64(k%7)/3 - 1, Temperature: tr.Temperature}
	s.Tokens = append(s.Tokens, tr.Prompt...)
	s.LossMask = make([]uint8, len(tr.Prompt))
	for ti, t := range tr.Turns {
		s.Tokens = append(s.Tokens, t.Action...)
		s.Tokens = append(s.Tokens, t.Observation...)
		for range t.Action {
			s.LossMask = append(s.LossMask, 1)
		}
		s.LossMask = append(s.LossMask, make([]uint8, len(t.Observation))...)
		d := float64(ti%3) - 1
		z := d / 2
		s.Turns = append(s.Turns, schemas.TurnDiag{Kind: t.Kind, Eligible: t.Kind == schemas.KindSearch, Delta: &d, Z: &z, ZNorm: &z,
			Gate: int32(ti % 2), ProcessAdvantage: z, Advantage: s.OutcomeAdvantage + z})
	}
	s.Advantages = make([]float32, len(s.Tokens))
	s.RolloutLogprobs = make([]float32, len(s.Tokens))
	for i, m := range s.LossMask {
		if m == 1 {
			s.Advantages[i] = float32(s.OutcomeAdvantage) + float32(i%5)/10
			s.RolloutLogprobs[i] = -0.5
		}
	}
	return s
}

// renumber rewrites the trajectory and prompt ids inside encoded sample
// bytes (both fixed-width, the first two fields) to sample k's.
func renumber(b []byte, k int) {
	// 10-byte header, 1-byte length, 't', 12 digits, 1-byte length, 'p', 11 digits.
	copy(b[12:24], fmt.Sprintf("%012d", k))
	copy(b[27:38], fmt.Sprintf("%011d", k/5))
}

// cpuSeconds is the CPU time (user + system) of the process so far: on a
// shared machine wall time also counts the time other processes held the
// core.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkDecodeAggregate measures what one reader goroutine does per
// search-QA sample: decode and aggregate (every sample distinct). Run it on
// one core: go test ./monitor -run XXX -bench DecodeAggregate -cpu 1. It
// reports samples/s and, for comparison, decode alone.
func BenchmarkDecodeAggregate(b *testing.B) {
	const templates = 64
	var enc [][]byte
	tokens := 0
	for k := 0; k < templates; k++ {
		s := searchQASample(k)
		tokens += len(s.Tokens)
		e, err := schemas.Samples().Encode(s)
		if err != nil {
			b.Fatal(err)
		}
		enc = append(enc, e)
	}
	b.Logf("search-QA samples: %d tokens and %d bytes on average", tokens/templates, len(enc[0]))
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := cpuSeconds()
		for i := 0; b.Loop(); i++ {
			if _, err := schemas.Samples().Decode(enc[i%templates]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		b.ReportMetric(float64(b.N)/(cpuSeconds()-cpu0), "samples/cpu-s")
	})
	b.Run("decode+aggregate", func(b *testing.B) {
		b.ReportAllocs()
		a := NewAggregator(DefaultConfig(), "s")
		cpu0 := cpuSeconds()
		for i := 0; b.Loop(); i++ {
			e := enc[i%templates]
			renumber(e, i)
			if err := a.AddRecordAt("s", 0, int64(i), e, time.Time{}); err != nil { // kept by location, as the reader does
				b.Fatal(err)
			}
		}
		cpu := cpuSeconds() - cpu0
		if s := a.Summary(); s.Samples != int64(b.N) || s.Duplicates != 0 {
			b.Fatalf("%d samples, %d duplicates after %d adds", s.Samples, s.Duplicates, b.N)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		b.ReportMetric(float64(b.N)/cpu, "samples/cpu-s")
	})
}

// BenchmarkMemoryFlat adds a million distinct search-QA samples (groups of
// 5, a new policy version every 5,000, each at a record location) and reports the live heap after 100k
// and after 1M samples, and their ratio: the aggregates are bounded, so the
// ratio stays near 1. Run it once: -bench MemoryFlat -benchtime 1x.
func BenchmarkMemoryFlat(b *testing.B) {
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc) / (1 << 20)
	}
	const templates = 64
	var tmpl []*schemas.Sample
	for k := 0; k < templates; k++ {
		tmpl = append(tmpl, searchQASample(k))
	}
	for b.Loop() {
		base := heap()
		a := NewAggregator(DefaultConfig(), "s")
		var at100k float64
		for k := 0; k < 1_000_000; k++ {
			s := *tmpl[k%templates]
			s.TrajectoryID = fmt.Sprintf("t%012d", k)
			s.PromptID = fmt.Sprintf("p%011d", k/5)
			s.PolicyVersion = int64(k / 5000)
			a.AddAt("s", k%4, int64(k/4), &s, time.Time{}) // kept by location, as the reader does
			if k+1 == 100_000 {
				at100k = heap() - base
			}
		}
		at1M := heap() - base
		sum := a.Summary()
		if sum.Samples != 1_000_000 || sum.Groups != 200_000 {
			b.Fatalf("%d samples, %d groups", sum.Samples, sum.Groups)
		}
		runtime.KeepAlive(a)
		b.ReportMetric(at100k, "heap-MiB-100k")
		b.ReportMetric(at1M, "heap-MiB-1M")
		b.ReportMetric(at1M/at100k, "ratio")
	}
}
