package cpumodel

import (
	"fmt"
	"math"

	"github.com/creditflow/creditflow/scorer"
)

// QueryBlock is the number of query tokens StepGraphs handles as one unit of
// work: the attention probabilities it holds at a time are O(QueryBlock × N)
// per worker, never N × N.
const QueryBlock = 128

// DefaultLayers maps the paper's six layers of a 28-layer model (zero-based
// 8, 10, 12, 14, 16, 18) to an n-layer model: floor((n−1)·l/27 + 0.5)
// (docs/method.md §3.1). Small models get repeated indices; callers that want each
// layer once remove the repeats.
func DefaultLayers(n int) []int {
	base := []int{8, 10, 12, 14, 16, 18}
	out := make([]int, len(base))
	for i, l := range base {
		out[i] = int(math.Floor(float64(n-1)*float64(l)/27 + 0.5))
	}
	return out
}

func (m *Model) validateGraphInput(tokens []int32, steps []scorer.Step, layers []int) error {
	N := len(tokens)
	if N == 0 {
		return fmt.Errorf("empty token array")
	}
	if N > m.cfg.MaxContext {
		return fmt.Errorf("%d tokens exceed the model's context of %d", N, m.cfg.MaxContext)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("token %d is %d, outside the vocabulary [0, %d)", i, t, m.cfg.Vocab)
		}
	}
	if len(layers) == 0 {
		return fmt.Errorf("no layers requested (the model has %d; see DefaultLayers)", m.cfg.Layers)
	}
	for _, l := range layers {
		if l < 0 || l >= m.cfg.Layers {
			return fmt.Errorf("layer %d does not exist: the model has layers 0..%d", l, m.cfg.Layers-1)
		}
	}
	prevEnd := 0
	for j, s := range steps {
		a := s.Action
		if a[0] < prevEnd || a[0] > a[1] || a[1] > N {
			return fmt.Errorf("step %d: action range [%d, %d) must lie inside the %d tokens, after the previous step (which ends at %d), with start <= end", j, a[0], a[1], N, prevEnd)
		}
		prevEnd = a[1]
		if o := s.Observation; o[0] != o[1] {
			if o[0] < a[1] || o[0] > o[1] || o[1] > N {
				return fmt.Errorf("step %d: observation range [%d, %d) must lie inside the %d tokens, after the step's action (which ends at %d), with start <= end", j, o[0], o[1], N, a[1])
			}
			prevEnd = o[1]
		}
	}
	return nil
}

// StepGraphs computes G_AA and G_AO (docs/method.md §3.1) on each requested layer, in
// the order of layers (repeats allowed): one forward pass of the whole token
// array (stopping after the deepest requested layer), then for every query
// token inside an action range the causal attention probabilities over all
// keys ≤ q (normalized over the full prefix), summed over the keys of each
// earlier step's action and observation, averaged over the step's query
// tokens and all query heads. Queries are processed in blocks of QueryBlock
// tokens, so memory stays O(QueryBlock × N) per worker. Steps must be ordered
// and non-overlapping; an empty Observation range means none, an empty
// Action range gives a zero row.
func (m *Model) StepGraphs(tokens []int32, steps []scorer.Step, layers []int) ([]scorer.StepGraph, error) {
	if err := m.validateGraphInput(tokens, steps, layers); err != nil {
		return nil, err
	}
	want, deepest := layerSet(layers)
	got := map[int]scorer.StepGraph{}
	c := m.newCache(len(tokens), deepest+1)
	m.forward(c, tokens, fwdOpts{layers: deepest + 1, onQ: func(l int, q []float32) {
		if want[l] {
			got[l] = m.blockwiseGraph(c, l, q, steps)
		}
	}})
	return orderGraphs(layers, got), nil
}

func layerSet(layers []int) (map[int]bool, int) {
	want := map[int]bool{}
	deepest := 0
	for _, l := range layers {
		want[l] = true
		deepest = max(deepest, l)
	}
	return want, deepest
}

func orderGraphs(layers []int, got map[int]scorer.StepGraph) []scorer.StepGraph {
	out := make([]scorer.StepGraph, len(layers))
	for i, l := range layers {
		g := got[l]
		out[i] = scorer.StepGraph{Layer: l, AA: cloneMat(g.AA), AO: cloneMat(g.AO)}
	}
	return out
}

func cloneMat(a [][]float64) [][]float64 {
	out := make([][]float64, len(a))
	for i := range a {
		out[i] = append([]float64(nil), a[i]...)
	}
	return out
}

func zeroMat(k int) [][]float64 {
	out := make([][]float64, k)
	for i := range out {
		out[i] = make([]float64, k)
	}
	return out
}

// blockPart is one query block's contribution: per querying step j, the sums
// over its queries in the block and all heads.
type blockPart struct {
	rows   []int
	aa, ao [][]float64
}

func (m *Model) blockwiseGraph(c *kvCache, l int, q []float32, steps []scorer.Step) scorer.StepGraph {
	cfg := m.cfg
	K := len(steps)
	D, HD := cfg.HeadDim, cfg.Heads*cfg.HeadDim
	group := cfg.Heads / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	// Query tokens in order, with their step.
	type qtok struct{ pos, step int }
	var queries []qtok
	for j, s := range steps {
		for p := s.Action[0]; p < s.Action[1]; p++ {
			queries = append(queries, qtok{p, j})
		}
	}
	nb := (len(queries) + QueryBlock - 1) / QueryBlock
	parts := make([]blockPart, nb)
	N := c.n
	workers := numWorkers()
	bufs := make([][]float32, workers)
	parallelFor(nb, len(queries)*N*HD, func(w, lo, hi int) {
		if bufs[w] == nil {
			bufs[w] = make([]float32, N)
		}
		buf := bufs[w]
		for b := lo; b < hi; b++ {
			blk := queries[b*QueryBlock : min((b+1)*QueryBlock, len(queries))]
			var part blockPart
			rowOf := map[int]int{}
			for _, qt := range blk {
				r, ok := rowOf[qt.step]
				if !ok {
					r = len(part.rows)
					rowOf[qt.step] = r
					part.rows = append(part.rows, qt.step)
					part.aa = append(part.aa, make([]float64, K))
					part.ao = append(part.ao, make([]float64, K))
				}
				aa, ao := part.aa[r], part.ao[r]
				for h := 0; h < cfg.Heads; h++ {
					g := h / group
					s := buf[:qt.pos+1]
					attentionProbs(s, q[qt.pos*HD+h*D:qt.pos*HD+(h+1)*D], c.k[l][g][:(qt.pos+1)*D], scale)
					for k := 0; k < qt.step; k++ {
						aa[k] += sum64(s[steps[k].Action[0]:steps[k].Action[1]])
						if o := steps[k].Observation; o[0] != o[1] {
							ao[k] += sum64(s[o[0]:o[1]])
						}
					}
				}
			}
			parts[b] = part
		}
	})
	g := scorer.StepGraph{Layer: l, AA: zeroMat(K), AO: zeroMat(K)}
	for _, p := range parts { // block order: deterministic sums
		for r, j := range p.rows {
			for k := 0; k < j; k++ {
				g.AA[j][k] += p.aa[r][k]
				g.AO[j][k] += p.ao[r][k]
			}
		}
	}
	for j, s := range steps {
		n := s.Action[1] - s.Action[0]
		if n == 0 {
			continue
		}
		d := float64(n * cfg.Heads)
		for k := 0; k < j; k++ {
			g.AA[j][k] /= d
			g.AO[j][k] /= d
		}
	}
	return g
}

func sum64(s []float32) float64 {
	var t float64
	for _, v := range s {
		t += float64(v)
	}
	return t
}

// StepGraphsDense computes the same graphs as StepGraphs from the full N×N
// attention matrix of every head, with a float64 softmax: a straightforward
// reference for tests. Its memory is O(N²); do not use it on long inputs.
func (m *Model) StepGraphsDense(tokens []int32, steps []scorer.Step, layers []int) ([]scorer.StepGraph, error) {
	if err := m.validateGraphInput(tokens, steps, layers); err != nil {
		return nil, err
	}
	want, deepest := layerSet(layers)
	cfg := m.cfg
	N, K, D, HD := len(tokens), len(steps), cfg.HeadDim, cfg.Heads*cfg.HeadDim
	got := map[int]scorer.StepGraph{}
	c := m.newCache(N, deepest+1)
	m.forward(c, tokens, fwdOpts{layers: deepest + 1, onQ: func(l int, q []float32) {
		if !want[l] {
			return
		}
		g := scorer.StepGraph{Layer: l, AA: zeroMat(K), AO: zeroMat(K)}
		P := make([][]float64, N)
		for i := range P {
			P[i] = make([]float64, N)
		}
		for h := 0; h < cfg.Heads; h++ {
			kv := h / (cfg.Heads / cfg.KVHeads)
			keys := c.k[l][kv]
			for i := 0; i < N; i++ {
				mx := math.Inf(-1)
				for j := 0; j < N; j++ {
					if j > i {
						P[i][j] = math.Inf(-1) // causal mask
						continue
					}
					var s float64
					for d := 0; d < D; d++ {
						s += float64(q[i*HD+h*D+d]) * float64(keys[j*D+d])
					}
					P[i][j] = s / math.Sqrt(float64(D))
					mx = math.Max(mx, P[i][j])
				}
				var z float64
				for j := 0; j < N; j++ {
					P[i][j] = math.Exp(P[i][j] - mx)
					z += P[i][j]
				}
				for j := 0; j < N; j++ {
					P[i][j] /= z
				}
			}
			for jj, sj := range steps {
				for i := sj.Action[0]; i < sj.Action[1]; i++ {
					for k := 0; k < jj; k++ {
						for key := 0; key < N; key++ {
							if key >= steps[k].Action[0] && key < steps[k].Action[1] {
								g.AA[jj][k] += P[i][key]
							}
							if o := steps[k].Observation; key >= o[0] && key < o[1] {
								g.AO[jj][k] += P[i][key]
							}
						}
					}
				}
			}
		}
		for j, s := range steps {
			if n := s.Action[1] - s.Action[0]; n > 0 {
				for k := 0; k < j; k++ {
					g.AA[j][k] /= float64(n * cfg.Heads)
					g.AO[j][k] /= float64(n * cfg.Heads)
				}
			}
		}
		got[l] = g
	}})
	return orderGraphs(layers, got), nil
}
