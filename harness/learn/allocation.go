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
	a.HelpfulLen += o.HelpfulLen
	a.HelpfulTop += o.HelpfulTop
	a.HelpfulReward += o.HelpfulReward
	a.HelpfulRewardEven += o.HelpfulRewardEven
	a.HarmfulSamples += o.HarmfulSamples
	a.HarmfulP += o.HarmfulP
	a.HarmfulEven += o.HarmfulEven
	a.HarmfulLen += o.HarmfulLen
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

// seedRatios are the per-seed ratios x/y of a run set's summed readings
// (seeds whose y is 0 left out) and their logs.
func seedRatios(sums []Allocation, x, y func(Allocation) float64) (r, logs []float64) {
	for _, a := range sums {
		if v := ratio(x(a), y(a)); !math.IsNaN(v) && v > 0 {
			r = append(r, v)
			logs = append(logs, math.Log(v))
		}
	}
	return r, logs
}

// ratioCells is "mean ± sd | k of n | p": the seeds' ratios, how many are
// above 1, and the sign-flip p of their logs.
func ratioCells(sums []Allocation, x, y func(Allocation) float64) string {
	r, logs := seedRatios(sums, x, y)
	if len(r) == 0 {
		return "— | 0 of 0 | —"
	}
	m, sd := meanSD(r)
	return fmt.Sprintf("%.3f ± %.3f | %d of %d | %s", m, sd, above(r, 1), len(r), formatP(signFlipP(logs)))
}

// allocationMarkdown is the table of where AttnSR's step shares landed on
// the turns the world labelled (docs/learn.md, "Where AttnSR's attention
// puts the budget"), per arm whose runs carry the readings: the share the
// helpful and the harmful moves got over what an even spread gives them
// (1 for an even spread), per seed over all its steps, then mean ± sd over
// the seeds, how many seeds read above 1 and the sign-flip p of the seeds'
// log-ratios; the first and the last step's ratio; how often the largest
// share is on a helpful move against chance; and the helpful and the
// harmful moves' step reward per sample against the even spread of the
// same budgets. Where the runs also read the share by length (a share
// proportional to each step's tokens), a second table sets the shares
// against it the same way. Empty without readings.
func (c Comparison) allocationMarkdown() string {
	var b, byLen strings.Builder
	helpP := func(a Allocation) float64 { return a.HelpfulP }
	harmP := func(a Allocation) float64 { return a.HarmfulP }
	helpEven := func(a Allocation) float64 { return a.HelpfulEven }
	harmEven := func(a Allocation) float64 { return a.HarmfulEven }
	for _, k := range c.methods() {
		var sums, firsts, lasts []Allocation
		var tot Allocation
		for _, r := range c.of(k) {
			a, ok := r.allocation(0, -1)
			if !ok {
				continue
			}
			sums = append(sums, a)
			tot.add(a)
			if f, ok := r.allocation(0, 1); ok {
				firsts = append(firsts, f)
			}
			if l, ok := r.allocation(r.Steps[len(r.Steps)-1].Step-1, -1); ok {
				lasts = append(lasts, l)
			}
		}
		if len(sums) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nWhere the step shares landed (AttnSR; docs/learn.md, \"Where AttnSR's attention puts the budget\"): ")
			b.WriteString("the share the labelled moves got over what an even spread gives them, per seed over its steps.\n\n")
			b.WriteString("| method | world | seeds | samples read | helpful moves: share / even (mean ± sd) | above 1 | sign-flip p (log) | first step | last step | largest share on a helpful move (chance) | harmful moves: share / even | above 1 | sign-flip p (log) | helpful step reward per sample (even spread) | harmful step reward per sample (even spread) |\n")
			b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		m, w := splitKey(k)
		first, _ := seedRatios(firsts, helpP, helpEven)
		last, _ := seedRatios(lasts, helpP, helpEven)
		fm, _ := meanSD(first)
		lm, _ := meanSD(last)
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %.3f | %.3f | %.3f (%.3f) | %s | %+.4f (%+.4f) | %+.4f (%+.4f) |\n",
			m, w, len(sums), tot.Samples, ratioCells(sums, helpP, helpEven), fm, lm,
			ratio(tot.HelpfulTop, float64(tot.HelpfulSamples)), ratio(tot.HelpfulEven, float64(tot.HelpfulSamples)),
			ratioCells(sums, harmP, harmEven),
			ratio(tot.HelpfulReward, float64(tot.HelpfulSamples)), ratio(tot.HelpfulRewardEven, float64(tot.HelpfulSamples)),
			ratio(tot.HarmfulReward, float64(tot.HarmfulSamples)), ratio(tot.HarmfulRewardEven, float64(tot.HarmfulSamples)))
		if tot.HelpfulLen == 0 && tot.HarmfulLen == 0 {
			continue
		}
		if byLen.Len() == 0 {
			byLen.WriteString("\nThe same shares against a share proportional to each step's tokens (its action and observation), per seed over its steps.\n\n")
			byLen.WriteString("| method | world | seeds | helpful moves: by length / even | share / by length (mean ± sd) | above 1 | sign-flip p (log) | harmful moves: by length / even | share / by length | above 1 | sign-flip p (log) |\n")
			byLen.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		fmt.Fprintf(&byLen, "| %s | %s | %d | %.3f | %s | %.3f | %s |\n", m, w, len(sums),
			ratio(tot.HelpfulLen, tot.HelpfulEven), ratioCells(sums, helpP, func(a Allocation) float64 { return a.HelpfulLen }),
			ratio(tot.HarmfulLen, tot.HarmfulEven), ratioCells(sums, harmP, func(a Allocation) float64 { return a.HarmfulLen }))
	}
	return b.String() + byLen.String()
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
