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
// on three measures, and two two-sided p-values. The unpaired one is a
// permutation test (the share of all ways to split the pooled runs into two
// groups of the same sizes whose means differ at least as much). The paired
// one uses the seeds both methods ran: seed s gives both the same episodes
// and judge verdicts to start from, so d_s = x_A(s) − x_B(s) is compared
// with its sign flipped at random (the share of the 2^n sign patterns whose
// mean |d| is at least the observed). Neither assumes anything about the
// shape of the spread, which three to ten seeds cannot show anyway.

// measure is one number per run.
type measure struct {
	name  string
	of    func(Summary) float64
	fmt   string
	count bool // a 0/1 per run: its means are written as "k of n"
}

// reachTarget is the held-out success whose first step is reported. A run
// that never reached it is censored: its step is unknown, so the measure
// compared is whether it reached it (k of n runs), not a mean of steps.
const reachTarget = 0.8

var measures = []measure{
	{name: "final success", of: func(s Summary) float64 { return s.FinalSuccess }, fmt: "%.3f"},
	{name: "mean success over versions (AUC)", of: auc, fmt: "%.3f"},
	{name: "reached 0.8 (runs)", of: func(s Summary) float64 {
		if stepsTo(s, reachTarget) >= 0 {
			return 1
		}
		return 0
	}, fmt: "%.2f", count: true},
}

// Difference is one measure compared between two methods.
type Difference struct {
	A, B         string // method/world keys
	Measure      string
	MeanA, MeanB float64
	NA, NB       int     // runs (seeds) of each
	P            float64 // two-sided permutation p-value
	Paired       int     // seeds both methods ran
	PairedP      float64 // two-sided sign-flip p-value over those seeds (NaN without two)
	format       string  // the measure's number format
	count        bool
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
				d := pairedDiffs(ra, rb, m.of)
				pp := math.NaN()
				if len(d) >= 2 {
					pp = signFlipP(d)
				}
				out = append(out, Difference{A: a, B: b, Measure: m.name, MeanA: ma, MeanB: mb,
					P: permutationP(xa, xb), NA: len(xa), NB: len(xb), Paired: len(d), PairedP: pp,
					format: m.fmt, count: m.count})
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

// pairedDiffs is x_A(s) − x_B(s) for each seed s that both ran, in the
// order of a's runs (a seed run twice counts its first run).
func pairedDiffs(a, b []Summary, f func(Summary) float64) []float64 {
	bySeed := map[int]float64{}
	for i := len(b) - 1; i >= 0; i-- {
		bySeed[b[i].Seed] = f(b[i])
	}
	var d []float64
	seen := map[int]bool{}
	for _, r := range a {
		if x, ok := bySeed[r.Seed]; ok && !seen[r.Seed] {
			seen[r.Seed] = true
			d = append(d, f(r)-x)
		}
	}
	return d
}

// signFlipP is the two-sided p-value of the mean of the paired differences d
// under the hypothesis that each difference's sign is a coin flip: the share
// of the 2^n sign patterns whose |mean| is at least the observed (ties
// count), enumerated up to exactSplits patterns, else estimated from
// randomSplits drawn with a fixed seed.
func signFlipP(d []float64) float64 { return signFlipTest(d, exactSplits) }

func signFlipTest(d []float64, exact float64) float64 {
	n := len(d)
	sum := 0.0
	for _, x := range d {
		sum += x
	}
	observed := math.Abs(sum) - 1e-12
	if math.Ldexp(1, n) <= exact {
		hits, all := 0, 1<<n
		for mask := 0; mask < all; mask++ {
			s := 0.0
			for i, x := range d {
				if mask&(1<<i) != 0 {
					s -= x
				} else {
					s += x
				}
			}
			if math.Abs(s) >= observed {
				hits++
			}
		}
		return float64(hits) / float64(all)
	}
	r := rand.New(rand.NewPCG(3, 4))
	hits := 0
	for t := 0; t < randomSplits; t++ {
		s := 0.0
		for _, x := range d {
			if r.IntN(2) == 1 {
				s -= x
			} else {
				s += x
			}
		}
		if math.Abs(s) >= observed {
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
	b.WriteString("\n| A | B | world | measure | A | B | A − B | seeds | permutation p (unpaired) | paired seeds | sign-flip p (paired by seed) |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range ds {
		f := d.format
		ma, w := splitKey(d.A)
		mb, _ := splitKey(d.B)
		va, vb := fmt.Sprintf(f, d.MeanA), fmt.Sprintf(f, d.MeanB)
		if d.count { // k of n runs
			va = fmt.Sprintf("%d of %d", int(math.Round(d.MeanA*float64(d.NA))), d.NA)
			vb = fmt.Sprintf("%d of %d", int(math.Round(d.MeanB*float64(d.NB))), d.NB)
		}
		pp := "—"
		if !math.IsNaN(d.PairedP) {
			pp = formatP(d.PairedP)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %+"+f[1:]+" | %d + %d | %s | %d | %s |\n",
			ma, mb, w, d.Measure, va, vb, d.MeanA-d.MeanB, d.NA, d.NB, formatP(d.P), d.Paired, pp)
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
