package learn

import (
	"fmt"
	"math"
	"strings"
)

// add sums o into a.
func (a *Allocation) add(o Allocation) {
	a.Samples += o.Samples
	a.HelpfulSamples += o.HelpfulSamples
	a.HelpfulP += o.HelpfulP
	a.HelpfulEven += o.HelpfulEven
	a.HelpfulTop += o.HelpfulTop
	a.HelpfulReward += o.HelpfulReward
	a.HelpfulRewardEven += o.HelpfulRewardEven
	a.HarmfulSamples += o.HarmfulSamples
	a.HarmfulP += o.HarmfulP
	a.HarmfulEven += o.HarmfulEven
	a.HarmfulTop += o.HarmfulTop
	a.HarmfulReward += o.HarmfulReward
	a.HarmfulRewardEven += o.HarmfulRewardEven
}

// allocation sums a run's alloc_* readings over its steps (from, to]
// (to < 0: every step); ok is false when no step carried them.
func (s Summary) allocation(from, to int) (sum Allocation, ok bool) {
	for _, st := range s.Steps {
		if st.Allocation == nil || st.Step <= from || (to >= 0 && st.Step > to) {
			continue
		}
		sum.add(*st.Allocation)
		ok = true
	}
	return sum, ok
}

// ratio is x/y, NaN when y is 0.
func ratio(x, y float64) float64 {
	if y == 0 {
		return math.NaN()
	}
	return x / y
}

// allocationMarkdown is the table of where AttnSR's step shares landed on
// the turns the world labelled (docs/learn.md, "Where AttnSR's attention
// puts the budget"), per arm whose runs carry the readings: the share the
// helpful and the harmful moves got over what an even spread gives them
// (1 for an even spread), per seed over all its steps, then mean ± sd over
// the seeds, how many seeds read above 1 and the sign-flip p of the seeds'
// log-ratios; the first and the last step's ratio; how often the largest
// share is on a helpful move against chance; and the helpful moves' step
// reward per sample against the even spread of the same budgets. Empty
// without readings.
func (c Comparison) allocationMarkdown() string {
	var b strings.Builder
	for _, k := range c.methods() {
		var help, harm, first, last, logHelp, logHarm []float64
		var tot Allocation
		seeds := 0
		for _, r := range c.of(k) {
			a, ok := r.allocation(0, -1)
			if !ok {
				continue
			}
			seeds++
			tot.add(a)
			if h := ratio(a.HelpfulP, a.HelpfulEven); !math.IsNaN(h) {
				help = append(help, h)
				logHelp = append(logHelp, math.Log(h))
			}
			if h := ratio(a.HarmfulP, a.HarmfulEven); !math.IsNaN(h) {
				harm = append(harm, h)
				logHarm = append(logHarm, math.Log(h))
			}
			if f, ok := r.allocation(0, 1); ok {
				if h := ratio(f.HelpfulP, f.HelpfulEven); !math.IsNaN(h) {
					first = append(first, h)
				}
			}
			if n := len(r.Steps); n > 0 {
				if l, ok := r.allocation(r.Steps[n-1].Step-1, -1); ok {
					if h := ratio(l.HelpfulP, l.HelpfulEven); !math.IsNaN(h) {
						last = append(last, h)
					}
				}
			}
		}
		if seeds == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nWhere the step shares landed (AttnSR; docs/learn.md, \"Where AttnSR's attention puts the budget\"): ")
			b.WriteString("the share the labelled moves got over what an even spread gives them, per seed over its steps.\n\n")
			b.WriteString("| method | world | seeds | samples read | helpful moves: share / even (mean ± sd) | above 1 | sign-flip p (log) | first step | last step | largest share on a helpful move (chance) | harmful moves: share / even | above 1 | sign-flip p (log) | helpful step reward per sample (even spread) |\n")
			b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		m, w := splitKey(k)
		hm, hs := meanSD(help)
		xm, xs := meanSD(harm)
		fm, _ := meanSD(first)
		lm, _ := meanSD(last)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.3f ± %.3f | %d of %d | %s | %.3f | %.3f | %.3f (%.3f) | %.3f ± %.3f | %d of %d | %s | %+.4f (%+.4f) |\n",
			m, w, seeds, tot.Samples, hm, hs, above(help, 1), len(help), formatP(signFlipP(logHelp)), fm, lm,
			ratio(tot.HelpfulTop, float64(tot.HelpfulSamples)), ratio(tot.HelpfulEven, float64(tot.HelpfulSamples)),
			xm, xs, above(harm, 1), len(harm), formatP(signFlipP(logHarm)),
			ratio(tot.HelpfulReward, float64(tot.HelpfulSamples)), ratio(tot.HelpfulRewardEven, float64(tot.HelpfulSamples)))
	}
	return b.String()
}

// above counts the xs greater than t.
func above(xs []float64, t float64) int {
	n := 0
	for _, x := range xs {
		if x > t {
			n++
		}
	}
	return n
}
