package learn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Whether two methods differ is decided on the seeds, not on one curve: for
// each pair of methods run on the same world, the difference of their means
// on three measures, and the two-sided p-value of a permutation test (the
// share of all ways to split the pooled runs into two groups of the same
// sizes whose means differ at least as much). It assumes nothing about the
// shape of the spread, which three to ten seeds cannot show anyway.

// measure is one number per run.
type measure struct {
	name string
	of   func(Summary) float64
	fmt  string
}

var measures = []measure{
	{"final success", func(s Summary) float64 { return s.FinalSuccess }, "%.3f"},
	{"mean success over versions (AUC)", auc, "%.3f"},
	{"first step ≥ 0.8 (never: steps + 1)", func(s Summary) float64 {
		if st := stepsTo(s, 0.8); st >= 0 {
			return float64(st)
		}
		return float64(len(s.Eval)) // the steps evaluated after version 0, plus one
	}, "%.1f"},
}

// Difference is one measure compared between two methods.
type Difference struct {
	A, B         string // method/world keys
	Measure      string
	MeanA, MeanB float64
	NA, NB       int     // runs (seeds) of each
	P            float64 // two-sided permutation p-value
	format       string  // the measure's number format
}

// Differences compares every pair of methods run on the same world.
func (c Comparison) Differences() []Difference {
	var out []Difference
	keys := c.methods()
	for i, a := range keys {
		for _, b := range keys[i+1:] {
			if world(a) != world(b) {
				continue
			}
			ra, rb := c.of(a), c.of(b)
			if len(ra) < 2 || len(rb) < 2 {
				continue
			}
			for _, m := range measures {
				xa, xb := values(ra, m.of), values(rb, m.of)
				ma, _ := meanSD(xa)
				mb, _ := meanSD(xb)
				out = append(out, Difference{A: a, B: b, Measure: m.name, MeanA: ma, MeanB: mb,
					P: permutationP(xa, xb), NA: len(xa), NB: len(xb), format: m.fmt})
			}
		}
	}
	return out
}

// splitKey is a method/world key's two parts.
func splitKey(key string) (method, world string) {
	method, world, _ = strings.Cut(key, "/")
	return method, world
}

func world(key string) string { _, w := splitKey(key); return w }

func values(rs []Summary, f func(Summary) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// exactSplits bounds the splits enumerated; above it the p-value is
// estimated from randomSplits random ones (a fixed seed: the same runs give
// the same p).
const (
	exactSplits  = 1 << 21
	randomSplits = 200000
)

// permutationP is the two-sided p-value of the difference of the means of a
// and b under the hypothesis that the labels do not matter.
func permutationP(a, b []float64) float64 { return permutationTest(a, b, exactSplits) }

// permutationTest enumerates the splits when there are at most exact of
// them, and draws randomSplits otherwise.
func permutationTest(a, b []float64, exact float64) float64 {
	pool := append(append([]float64(nil), a...), b...)
	n, k := len(pool), len(a)
	total := 0.0
	for _, x := range pool {
		total += x
	}
	diff := func(sumA float64) float64 { return math.Abs(sumA/float64(k) - (total-sumA)/float64(n-k)) }
	sumA := 0.0
	for _, x := range a {
		sumA += x
	}
	observed := diff(sumA) - 1e-12 // splits that tie the observed difference count
	if binomial(n, k) <= exact {
		var hits, all int
		idx := make([]int, k)
		for i := range idx {
			idx[i] = i
		}
		for {
			s := 0.0
			for _, i := range idx {
				s += pool[i]
			}
			all++
			if diff(s) >= observed {
				hits++
			}
			// next combination of k indices out of n
			i := k - 1
			for i >= 0 && idx[i] == n-k+i {
				i--
			}
			if i < 0 {
				return float64(hits) / float64(all)
			}
			idx[i]++
			for j := i + 1; j < k; j++ {
				idx[j] = idx[j-1] + 1
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	perm := make([]float64, n)
	hits := 0
	for t := 0; t < randomSplits; t++ {
		copy(perm, pool)
		s := 0.0
		for i := 0; i < k; i++ { // a partial Fisher–Yates shuffle draws k of n
			j := i + r.IntN(n-i)
			perm[i], perm[j] = perm[j], perm[i]
			s += perm[i]
		}
		if diff(s) >= observed {
			hits++
		}
	}
	return float64(hits+1) / float64(randomSplits+1)
}

func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// differencesMarkdown is the table of Differences (empty without a pair).
func (c Comparison) differencesMarkdown() string {
	ds := c.Differences()
	if len(ds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| A | B | world | measure | A (mean) | B (mean) | A − B | seeds | permutation p |\n|---|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, d := range ds {
		f := d.format
		ma, w := splitKey(d.A)
		mb, _ := splitKey(d.B)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | "+f+" | "+f+" | %+"+f[1:]+" | %d + %d | %s |\n",
			ma, mb, w, d.Measure, d.MeanA, d.MeanB, d.MeanA-d.MeanB, d.NA, d.NB, formatP(d.P))
	}
	return b.String()
}

// formatP writes p with three decimals, or two significant digits below
// 0.01 (so that 2 splits in 12,870 do not read as 0).
func formatP(p float64) string {
	if p < 0.01 {
		return strconv.FormatFloat(p, 'g', 2, 64)
	}
	return strconv.FormatFloat(p, 'f', 3, 64)
}
