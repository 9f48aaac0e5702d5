package cpumodel

import (
	"fmt"
	"math"

	"github.com/creditflow/creditflow/scorer"
)

// CheckStatistic reports a statistic name that is not one of the three
// (scorer.StatLogProb, StatEntropy, StatKL). Unlike scorer.CheckStatistic
// it refuses "": the model is always told which statistic to compute.
func CheckStatistic(s string) error {
	if s == "" {
		return fmt.Errorf("statistic %q: use logprob, entropy or kl", s)
	}
	return scorer.CheckStatistic(s)
}

// logSoftmax returns log softmax(W·h / temp) over the whole vocabulary, in
// float64 (the logits are float32, as in logProbs).
func (m *Model) logSoftmax(h []float32, temp float64) []float64 {
	V, H := m.cfg.Vocab, m.cfg.Hidden
	out := make([]float64, V)
	mx := math.Inf(-1)
	for v := 0; v < V; v++ {
		out[v] = float64(dot(m.lmHead[v*H:(v+1)*H], h)) / temp
		mx = math.Max(mx, out[v])
	}
	var sum float64
	for _, z := range out {
		sum += math.Exp(z - mx)
	}
	lse := mx + math.Log(sum)
	for v := range out {
		out[v] -= lse
	}
	return out
}

// spanDists forwards one prepared row and returns the log-distributions
// that predict target[a:b] (position ctxLen+k−1 for each k).
func (m *Model) spanDists(r preparedRow) [][]float64 {
	c := m.newCache(len(r.seq), m.cfg.Layers)
	out := make([]bool, len(r.seq))
	for k := r.a; k < r.b; k++ {
		out[r.ctxLen+k-1] = true
	}
	hs := m.forward(c, r.seq, fwdOpts{out: out})
	ds := make([][]float64, len(hs))
	parallelFor(len(hs), len(hs)*m.cfg.Vocab*m.cfg.Hidden, func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			ds[j] = m.logSoftmax(hs[j], r.temp)
		}
	})
	return ds
}

// ScoreRowsStatistic returns the statistic stat of every row: StatLogProb
// is ScoreRows; StatEntropy the mean entropy of the distributions that
// predict Target[a:b] given Context; StatKL the mean KL divergence between
// those distributions given Context and given ReferenceContext (which every
// row then needs). Logits are divided by the row's temperature first.
// Entropy and KL rows are forwarded one by one (no prefix sharing); a
// context too long is cut from the left as in ScoreRows, for each context
// on its own.
func (m *Model) ScoreRowsStatistic(rows []scorer.Row, stat string) ([]float64, scorer.Usage, error) {
	if err := CheckStatistic(stat); err != nil {
		return nil, scorer.Usage{}, err
	}
	if stat == scorer.StatLogProb {
		return m.ScoreRows(rows)
	}
	prep, u, err := m.prepareRows(rows)
	if err != nil {
		return nil, u, err
	}
	var refs []preparedRow
	if stat == scorer.StatKL {
		alt := make([]scorer.Row, len(rows))
		for i, r := range rows {
			if r.ReferenceContext == nil {
				return nil, u, fmt.Errorf("row %d: the kl statistic needs a reference context", i)
			}
			alt[i] = r
			alt[i].Context = r.ReferenceContext
		}
		var ru scorer.Usage
		if refs, ru, err = m.prepareRows(alt); err != nil {
			return nil, u, fmt.Errorf("reference context: %w", err)
		}
		u.Truncations += ru.Truncations
		u.TokensRowByRow += ru.TokensRowByRow
	}
	scores := make([]float64, len(prep))
	for i, r := range prep {
		ps := m.spanDists(r)
		u.TokensForwarded += int64(len(r.seq))
		var qs [][]float64
		if stat == scorer.StatKL {
			qs = m.spanDists(refs[i])
			u.TokensForwarded += int64(len(refs[i].seq))
		}
		var s float64
		for k, lp := range ps {
			var x float64
			for v, l := range lp {
				p := math.Exp(l)
				if p == 0 {
					continue // 0 · log 0 = 0
				}
				if stat == scorer.StatEntropy {
					x -= p * l
				} else {
					x += p * (l - qs[k][v])
				}
			}
			s += x
		}
		scores[i] = s / float64(len(ps))
	}
	return scores, u, nil
}
