package credit

import (
	"math"
	"strings"
	"unicode/utf8"
)

// docs/method.md §1: outcome reward and outcome advantage (both methods).

// Normalize applies the answer normalization of docs/method.md §1, in this
// order, as the reference's Python does it on a str:
//   - lowercase (Python's str.lower, see lower);
//   - remove ASCII punctuation (Python's string.punctuation);
//   - replace each article "a", "an", "the" that stands between word
//     boundaries by a space: re.sub(r"\b(a|an|the)\b", " ", s), where a word
//     character is a Unicode letter, number or "_" (isWordChar), so "“the"
//     and "the—end" lose their article and "théa" keeps its letters;
//   - collapse runs of whitespace (Python's str.isspace, isSpace) to one
//     space and trim.
func Normalize(s string) string { return strings.Join(answerWords(s), " ") }

// answerWords is Normalize(s) split at its spaces: the words F1 compares
// (splitting the joined string again would give the same words).
func answerWords(s string) []string {
	s = lower(s)
	s = strings.Map(func(r rune) rune {
		if isASCIIPunct(r) {
			return -1
		}
		return r
	}, s)
	return strings.FieldsFunc(dropArticles(s), isSpace)
}

// dropArticles is re.sub(r"\b(a|an|the)\b", " ", s) on a Python str: a match
// is bounded by \b on both sides and consists of word characters only, so it
// is exactly a maximal run of word characters equal to an article. Matches
// are found on the original string, so "the the" loses both.
func dropArticles(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isWordChar(r) {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		j := i + n
		for j < len(s) {
			r, n := utf8.DecodeRuneInString(s[j:])
			if !isWordChar(r) {
				break
			}
			j += n
		}
		switch w := s[i:j]; w {
		case "a", "an", "the":
			b.WriteByte(' ')
		default:
			b.WriteString(w)
		}
		i = j
	}
	return b.String()
}

// isASCIIPunct is Python's string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
func isASCIIPunct(r rune) bool {
	return (r >= '!' && r <= '/') || (r >= ':' && r <= '@') || (r >= '[' && r <= '`') || (r >= '{' && r <= '~')
}

// F1 is the token-level F1 of pred against gold after Normalize (docs/method.md §1).
// Both empty: 1; one empty: 0; otherwise 2PR/(P+R) over the multiset
// intersection of whitespace tokens (0 when nothing overlaps).
func F1(pred, gold string) float64 { return f1Words(answerWords(pred), answerWords(gold)) }

// f1Words is F1 of the answer words p and g.
func f1Words(p, g []string) float64 {
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
func BestF1(pred *string, golds []string) float64 { return bestF1(pred, golds, nil) }

// bestF1 is BestF1 with the gold answers' words kept in words (when not
// nil) for the next member of the group, whose golds are usually the same.
func bestF1(pred *string, golds []string, words map[string][]string) float64 {
	if pred == nil {
		return 0
	}
	p := answerWords(*pred)
	best := 0.0
	for _, g := range golds {
		gw, ok := words[g]
		if !ok {
			gw = answerWords(g)
			if words != nil {
				words[g] = gw
			}
		}
		if f := f1Words(p, gw); f > best {
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
