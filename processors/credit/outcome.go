package credit

import (
	"math"
	"strings"
)

// docs/method.md §1: outcome reward and outcome advantage (both methods).

// Normalize applies the docs/method.md §1 answer normalization, in this order:
// lowercase; remove ASCII punctuation; remove the words "a", "an", "the"
// (a word is a whitespace-separated token); collapse runs of whitespace to
// one space and trim.
func Normalize(s string) string {
	s = strings.ToLower(s)
	s = strings.Map(func(r rune) rune {
		if isASCIIPunct(r) {
			return -1
		}
		return r
	}, s)
	words := strings.Fields(s)
	kept := words[:0]
	for _, w := range words {
		if w == "a" || w == "an" || w == "the" {
			continue
		}
		kept = append(kept, w)
	}
	return strings.Join(kept, " ")
}

// isASCIIPunct is Python's string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
func isASCIIPunct(r rune) bool {
	return (r >= '!' && r <= '/') || (r >= ':' && r <= '@') || (r >= '[' && r <= '`') || (r >= '{' && r <= '~')
}

// F1 is the token-level F1 of pred against gold after Normalize (docs/method.md §1).
// Both empty: 1; one empty: 0; otherwise 2PR/(P+R) over the multiset
// intersection of whitespace tokens (0 when nothing overlaps).
func F1(pred, gold string) float64 {
	p := strings.Fields(Normalize(pred))
	g := strings.Fields(Normalize(gold))
	if len(p) == 0 || len(g) == 0 {
		if len(p) == 0 && len(g) == 0 {
			return 1
		}
		return 0
	}
	counts := make(map[string]int, len(g))
	for _, w := range g {
		counts[w]++
	}
	overlap := 0
	for _, w := range p {
		if counts[w] > 0 {
			counts[w]--
			overlap++
		}
	}
	if overlap == 0 {
		return 0
	}
	precision := float64(overlap) / float64(len(p))
	recall := float64(overlap) / float64(len(g))
	return 2 * precision * recall / (precision + recall)
}

// BestF1 is R_i when the record carries no reward: the best F1 of pred over
// golds. A missing prediction (nil) and an empty gold list both score 0.
func BestF1(pred *string, golds []string) float64 {
	if pred == nil {
		return 0
	}
	best := 0.0
	for _, g := range golds {
		if f := F1(*pred, g); f > best {
			best = f
		}
	}
	return best
}

// EM reports whether the normalized prediction equals any normalized gold
// (docs/method.md §1, for evaluation and monitoring).
func EM(pred string, golds []string) bool {
	p := Normalize(pred)
	for _, g := range golds {
		if Normalize(g) == p {
			return true
		}
	}
	return false
}

// Mean is the arithmetic mean, summed left to right; 0 for no values.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// PopStd is the population standard deviation (divide by n) around Mean.
func PopStd(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := Mean(xs)
	s := 0.0
	for _, x := range xs {
		d := x - m
		s += d * d
	}
	return math.Sqrt(s / float64(len(xs)))
}

// OutcomeAdvantages is docs/method.md §1: A_out_i = (R_i − mean R) / (std R + ε_R),
// population std over the group members present.
func OutcomeAdvantages(rewards []float64, epsR float64) []float64 {
	m, sd := Mean(rewards), PopStd(rewards)
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		out[i] = (r - m) / (sd + epsR)
	}
	return out
}
