package cpumodel

import (
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/creditflow/creditflow/scorer"
)

// cpuSeconds is the process's user+system CPU time: the benchmarks report
// throughput per CPU second too, which stays meaningful on a busy machine.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// searchQATrajectory builds the LAPO backward rows of one search-QA
// trajectory: prompt ≈ 250 tokens, 1–3 search turns of ≈ 60 action + ≈ 450
// observation tokens, an answer turn (left out of c_full), a gold template of
// 25 tokens whose span [14, 22) is the gold answer. Rows: c_full and one c_−t
// per turn with the turn replaced by the placeholder.
func searchQATrajectory(r *rand.Rand) []scorer.Row {
	jit := func(n int) int { return n - n/10 + r.IntN(n/5+1) }
	prompt := randTokens(r, jit(250), 256)
	turns := make([][]int32, 1+r.IntN(3))
	for i := range turns {
		turns[i] = append(randTokens(r, jit(60), 256), randTokens(r, jit(450), 256)...)
	}
	tgt := randTokens(r, 25, 256)
	span := [2]int{14, 22}
	full := append([]int32(nil), prompt...)
	for _, t := range turns {
		full = append(full, t...)
	}
	rows := []scorer.Row{{Context: full, Target: tgt, Span: span}}
	for i := range turns {
		c := append([]int32(nil), prompt...)
		for j, t := range turns {
			if j == i {
				c = append(c, TinyDelete)
			} else {
				c = append(c, t...)
			}
		}
		rows = append(rows, scorer.Row{Context: c, Target: tgt, Span: span})
	}
	return rows
}

func benchLAPO(b *testing.B, naive bool) {
	m := Tiny()
	r := rand.New(rand.NewPCG(2026, 1))
	const trajectories = 8
	sets := make([][]scorer.Row, trajectories)
	var padded int64
	for i := range sets {
		sets[i] = searchQATrajectory(r)
		longest := 0
		for _, row := range sets[i] {
			longest = max(longest, len(row.Context)+len(row.Target))
		}
		padded += int64(longest * len(sets[i]))
	}
	score := m.ScoreRows
	if naive {
		score = m.ScoreRowsNaive
	}
	var total scorer.Usage
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for it := 0; it < b.N; it++ {
		total = scorer.Usage{}
		for _, rows := range sets { // one row set per trajectory, as the scorer receives them
			_, u, err := score(rows)
			if err != nil {
				b.Fatal(err)
			}
			total.TokensForwarded += u.TokensForwarded
			total.TokensRowByRow += u.TokensRowByRow
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	cpu := (cpuSeconds() - cpu0) / float64(b.N)
	b.ReportMetric(float64(total.TokensForwarded)/sec, "fwd_tokens/s")
	b.ReportMetric(float64(total.TokensForwarded)/cpu, "fwd_tokens/cpu_s")
	b.ReportMetric(float64(total.TokensRowByRow)/sec, "row_tokens/s")
	b.ReportMetric(float64(total.TokensForwarded)/float64(total.TokensRowByRow), "fwd/rowbyrow")
	b.ReportMetric(float64(total.TokensForwarded)/float64(padded), "fwd/padded")
	b.ReportMetric(float64(total.TokensForwarded)/trajectories, "fwd_tokens/traj")
}

// BenchmarkLAPOSearchQA scores the backward rows of search-QA trajectories on
// the tiny model with prefix sharing; BenchmarkLAPOSearchQANaive is the
// row-by-row baseline on the same rows (compare row_tokens/s).
func BenchmarkLAPOSearchQA(b *testing.B)      { benchLAPO(b, false) }
func BenchmarkLAPOSearchQANaive(b *testing.B) { benchLAPO(b, true) }

func benchGraphs(b *testing.B, prompt, k, act, obs int) {
	m := Tiny()
	r := rand.New(rand.NewPCG(7, 7))
	steps := make([]scorer.Step, k)
	pos := prompt
	for j := range steps {
		steps[j] = scorer.Step{Action: [2]int{pos, pos + act}, Observation: [2]int{pos + act, pos + act + obs}}
		pos += act + obs
	}
	toks := randTokens(r, pos, 256)
	layers := uniqueInts(DefaultLayers(m.Info().Layers))
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		if _, err := m.StepGraphs(toks, steps, layers); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(pos)/sec, "tokens/s")
	b.ReportMetric(float64(pos)/((cpuSeconds()-cpu0)/float64(b.N)), "tokens/cpu_s")
	b.ReportMetric(float64(pos), "tokens")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/(1<<20), "alloc_MiB/op")
	b.ReportMetric(float64(pos)*float64(pos)*4/(1<<20), "one_NxN_f32_MiB")
}

// BenchmarkStepGraphsALFWorld: prompt 200, 20 steps of 15 action + 40
// observation tokens.
func BenchmarkStepGraphsALFWorld(b *testing.B) { benchGraphs(b, 200, 20, 15, 40) }

// BenchmarkStepGraphsLong8k: about 8k tokens (100 steps of 20 + 60); the
// allocation per op stays far below a single N×N matrix.
func BenchmarkStepGraphsLong8k(b *testing.B) { benchGraphs(b, 200, 100, 20, 60) }
