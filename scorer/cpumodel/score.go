package cpumodel

import (
	"fmt"
	"math"

	"github.com/creditflow/creditflow/scorer"
)

// preparedRow is a validated row: its full sequence context+target (context
// already cut from the left to fit MaxContext) and where the span starts.
type preparedRow struct {
	seq    []int32
	ctxLen int
	a, b   int
	temp   float64 // > 0
}

func (m *Model) prepareRows(rows []scorer.Row) ([]preparedRow, scorer.Usage, error) {
	var u scorer.Usage
	out := make([]preparedRow, len(rows))
	V := m.cfg.Vocab
	for i, r := range rows {
		a, b := r.Span[0], r.Span[1]
		if a < 0 || b > len(r.Target) || a >= b {
			return nil, u, fmt.Errorf("row %d: span [%d, %d) is not a non-empty range inside the target (%d tokens)", i, a, b, len(r.Target))
		}
		temp := r.Temperature
		if math.IsNaN(temp) || math.IsInf(temp, 0) || temp < 0 {
			return nil, u, fmt.Errorf("row %d: temperature %v must be finite and > 0 (0 or absent means 1)", i, temp)
		}
		if temp == 0 {
			temp = 1
		}
		if len(r.Target) > m.cfg.MaxContext {
			return nil, u, fmt.Errorf("row %d: target has %d tokens, more than the model's context (%d)", i, len(r.Target), m.cfg.MaxContext)
		}
		for j, t := range r.Context {
			if t < 0 || int(t) >= V {
				return nil, u, fmt.Errorf("row %d: context token %d is %d, outside the vocabulary [0, %d)", i, j, t, V)
			}
		}
		for j, t := range r.Target {
			if t < 0 || int(t) >= V {
				return nil, u, fmt.Errorf("row %d: target token %d is %d, outside the vocabulary [0, %d)", i, j, t, V)
			}
		}
		ctx := r.Context
		if over := len(ctx) + len(r.Target) - m.cfg.MaxContext; over > 0 {
			ctx = ctx[over:]
			u.Truncations++
		}
		if len(ctx)+a == 0 {
			return nil, u, fmt.Errorf("row %d: the first scored token has no preceding token to condition on (empty context and span starting at 0)", i)
		}
		seq := make([]int32, 0, len(ctx)+len(r.Target))
		seq = append(append(seq, ctx...), r.Target...)
		out[i] = preparedRow{seq: seq, ctxLen: len(ctx), a: a, b: b, temp: temp}
		u.TokensRowByRow += int64(len(seq))
	}
	return out, u, nil
}

// ScoreRows returns S for every row (docs/method.md §2.1): the mean natural-log
// probability of Target[a:b] given Context and Target[:k], under the logits
// divided by the row's temperature. Rows are merged into a prefix trie over
// their full sequences and every trie edge is forwarded once on top of its
// parent's key/value cache, so rows that share a prefix (the rows of one
// trajectory) compute it once. The key/value cache and the final hidden
// states do not depend on the temperature, so rows of different temperatures
// share them too; each log-probability is kept per (trie node, temperature).
// The scores equal ScoreRowsNaive's exactly. A context longer than
// MaxContext−len(Target) keeps its rightmost tokens (counted in
// Usage.Truncations).
func (m *Model) ScoreRows(rows []scorer.Row) ([]float64, scorer.Usage, error) {
	prep, u, err := m.prepareRows(rows)
	if err != nil {
		return nil, u, err
	}
	if len(prep) == 0 {
		return []float64{}, u, nil
	}
	t := newTrie()
	spans := make([][]int, len(prep)) // result slot of each scored token
	maxLen := 0
	for i, r := range prep {
		path := t.insert(r.seq)
		maxLen = max(maxLen, len(r.seq))
		for k := r.a; k < r.b; k++ {
			spans[i] = append(spans[i], t.request(path[r.ctxLen+k], r.temp))
		}
	}
	u.TokensForwarded = int64(len(t.tok) - 1)
	cache := m.newCache(maxLen, m.cfg.Layers)
	m.walk(t, cache, 0, 0)
	scores := make([]float64, len(prep))
	for i, sp := range spans {
		var s float64
		for _, slot := range sp {
			s += t.lp[slot]
		}
		scores[i] = s / float64(len(sp))
	}
	return scores, u, nil
}

// walk forwards the subtree below node (whose path, depth tokens long, is in
// the cache), one chain of single-child nodes at a time.
func (m *Model) walk(t *trie, c *kvCache, node int32, depth int) {
	for child := t.first[node]; child >= 0; child = t.next[child] {
		c.truncate(depth)
		chain := []int32{child}
		n := child
		for t.first[n] >= 0 && t.next[t.first[n]] < 0 {
			n = t.first[n]
			chain = append(chain, n)
		}
		toks := make([]int32, len(chain))
		out := make([]bool, len(chain))
		var outNodes []int32
		for i, cn := range chain {
			toks[i] = t.tok[cn]
			if t.out[cn] {
				out[i] = true
				outNodes = append(outNodes, cn)
			}
		}
		hs := m.forward(c, toks, fwdOpts{out: out})
		m.fillLogProbs(t, outNodes, hs)
		m.walk(t, c, n, depth+len(chain))
	}
}

// fillLogProbs answers the requests of the given nodes (log-probabilities of
// their children, per temperature) from the nodes' final hidden states.
func (m *Model) fillLogProbs(t *trie, nodes []int32, hs [][]float32) {
	parallelFor(len(nodes), len(nodes)*m.cfg.Vocab*m.cfg.Hidden, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			reqs := t.reqs[nodes[i]]
			done := make([]bool, len(reqs))
			for a := range reqs { // one softmax per distinct temperature
				if done[a] {
					continue
				}
				var toks []int32
				var slots []int
				for b := a; b < len(reqs); b++ {
					if !done[b] && reqs[b].temp == reqs[a].temp {
						done[b] = true
						toks = append(toks, reqs[b].tok)
						slots = append(slots, reqs[b].slot)
					}
				}
				lp := m.logProbs(hs[i], toks, reqs[a].temp)
				for j, s := range slots {
					t.lp[s] = lp[j]
				}
			}
		}
	})
}

// ScoreRowsNaive scores every row on its own, forwarding its whole sequence
// from an empty cache: the reference ScoreRows is tested against.
func (m *Model) ScoreRowsNaive(rows []scorer.Row) ([]float64, scorer.Usage, error) {
	prep, u, err := m.prepareRows(rows)
	if err != nil {
		return nil, u, err
	}
	scores := make([]float64, len(prep))
	for i, r := range prep {
		c := m.newCache(len(r.seq), m.cfg.Layers)
		out := make([]bool, len(r.seq))
		for k := r.a; k < r.b; k++ {
			out[r.ctxLen+k-1] = true
		}
		hs := m.forward(c, r.seq, fwdOpts{out: out})
		lps := make([]float64, len(hs))
		parallelFor(len(hs), len(hs)*m.cfg.Vocab*m.cfg.Hidden, func(_, lo, hi int) {
			for j := lo; j < hi; j++ {
				k := r.a + j
				lps[j] = m.logProbs(hs[j], []int32{r.seq[r.ctxLen+k]}, r.temp)[0]
			}
		})
		var s float64
		for _, lp := range lps {
			s += lp
		}
		scores[i] = s / float64(r.b-r.a)
		u.TokensForwarded += int64(len(r.seq))
	}
	return scores, u, nil
}

// trie is a prefix tree over token sequences in flat arrays; node 0 is the
// root (no token), a node's position in the sequence is its depth − 1.
// A scored token is a request for log p(node's token | path before it) at a
// temperature: out marks the nodes whose hidden state answers requests
// (parents of requested nodes), reqs lists them per such node, and lp holds
// the answers, one slot per distinct (node, temperature).
type trie struct {
	tok         []int32
	parent      []int32
	first, next []int32
	out         []bool
	reqs        map[int32][]scoreReq
	slot        map[slotKey]int
	lp          []float64
}

type scoreReq struct {
	tok  int32
	temp float64
	slot int
}

type slotKey struct {
	node int32
	temp float64
}

func newTrie() *trie {
	return &trie{tok: []int32{-1}, parent: []int32{-1}, first: []int32{-1}, next: []int32{-1}, out: []bool{false},
		reqs: map[int32][]scoreReq{}, slot: map[slotKey]int{}}
}

// request asks for the log-probability of node n's token at temperature
// temp and returns the slot of t.lp that will hold it.
func (t *trie) request(n int32, temp float64) int {
	k := slotKey{n, temp}
	if s, ok := t.slot[k]; ok {
		return s
	}
	s := len(t.lp)
	t.lp = append(t.lp, 0)
	t.slot[k] = s
	p := t.parent[n]
	t.out[p] = true
	t.reqs[p] = append(t.reqs[p], scoreReq{tok: t.tok[n], temp: temp, slot: s})
	return s
}

// insert adds seq and returns the node of every token (path[i] holds seq[i]).
func (t *trie) insert(seq []int32) []int32 {
	path := make([]int32, len(seq))
	cur := int32(0)
	for i, tok := range seq {
		ch := t.first[cur]
		var last int32 = -1
		for ch >= 0 && t.tok[ch] != tok {
			last = ch
			ch = t.next[ch]
		}
		if ch < 0 {
			ch = int32(len(t.tok))
			t.tok = append(t.tok, tok)
			t.parent = append(t.parent, cur)
			t.first = append(t.first, -1)
			t.next = append(t.next, -1)
			t.out = append(t.out, false)
			if last < 0 {
				t.first[cur] = ch
			} else {
				t.next[last] = ch
			}
		}
		path[i] = ch
		cur = ch
	}
	return path
}
