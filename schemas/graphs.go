package schemas

import (
	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/schemas/internal/avrobin"
)

// Compact AttnSR step graphs (docs/wire-format.md, "Scored"): the entries
// below the diagonal only, and where that is exact only their sums; the form
// and its rule are package stepgraph's, which the scorer protocol's
// lower-graphs answer shares.

// LowerGraph is one layer's AttnSR step graph below its diagonal
// (stepgraph.Lower): AA and AO, K(K−1)/2 values each, or (the sum form)
// only Sum, entry [j,k] (k < j) at LowerIndex(j, k), bit for bit the values
// of the K×K LayerGraph it stands for.
type LowerGraph = stepgraph.Lower

// LowerIndex is the position of entry [j,k], k < j, of a graph below its
// diagonal: j(j−1)/2 + k.
func LowerIndex(j, k int) int { return stepgraph.Index(j, k) }

// LowerLen is the number of entries below the diagonal of a K×K graph.
func LowerLen(k int) int { return stepgraph.Len(k) }

// Lower is g without the entries on and above its diagonal (which AttnSR
// never reads and which the protocol sets to 0).
func (g *LayerGraph) Lower() LowerGraph {
	k := int(g.K)
	n := LowerLen(k)
	flat := make([]float64, 2*n)
	out := LowerGraph{Layer: g.Layer, K: g.K, AA: flat[:n:n], AO: flat[n:]}
	for j := 1; j < k; j++ {
		copy(out.AA[LowerIndex(j, 0):LowerIndex(j+1, 0)], g.AA[j*k:j*k+j])
		copy(out.AO[LowerIndex(j, 0):LowerIndex(j+1, 0)], g.AO[j*k:j*k+j])
	}
	return out
}

// SumForm is g in the sum form where that changes nothing AttnSR computes,
// and g itself otherwise. AttnSR reads an entry pair only as
// G = 0.5·aa + 0.5·ao (docs/method.md §3.1) and as aa + ao (the focus mass,
// §3.2 step 5); from the sum s = aa + ao it computes G as 0.5·s. The sum
// form is taken only when, for every entry, 0.5·s has the same bits as
// 0.5·aa + 0.5·ao (it has, unless halving underflows into the subnormals)
// and aa and ao are each a valid attention mass in [0, 1], so that the
// record is accepted or refused exactly as the pair would be.
func SumForm(g LowerGraph) LowerGraph {
	n := LowerLen(int(g.K))
	if g.Summed() || n == 0 || len(g.AA) != n || len(g.AO) != n || !stepgraph.SumExact(g.AA, g.AO) {
		return g
	}
	sum := make([]float64, n)
	for i, a := range g.AA {
		sum[i] = a + g.AO[i]
	}
	return LowerGraph{Layer: g.Layer, K: g.K, Sum: sum}
}

// StepGraphs are s's step graphs below the diagonal: Graphs as written, or
// the graphs of a record of an earlier generation (K×K, in Attention) cut
// to their lower triangles.
func (s *Scored) StepGraphs() []LowerGraph {
	if len(s.Graphs) > 0 || len(s.Attention) == 0 {
		return s.Graphs
	}
	out := make([]LowerGraph, 0, len(s.Attention))
	for i := range s.Attention {
		g := &s.Attention[i]
		if k := int(g.K); k < 0 || len(g.AA) != k*k || len(g.AO) != k*k {
			out = append(out, LowerGraph{Layer: g.Layer, K: g.K}) // mis-shaped: ValidateScored refuses it
			continue
		}
		out = append(out, g.Lower())
	}
	return out
}

func lowerGraphsToNative(gs []LowerGraph) []any {
	out := make([]any, len(gs))
	for i := range gs {
		g := &gs[i]
		out[i] = map[string]any{"layer": g.Layer, "k": g.K, "aa": packFloat64(g.AA), "ao": packFloat64(g.AO), "sum": packFloat64(g.Sum)}
	}
	return out
}

func lowerGraphsFromNative(n *nat, field string) []LowerGraph {
	items := n.list(field)
	if len(items) == 0 {
		return nil
	}
	out := make([]LowerGraph, len(items))
	n.records(field, func(i int, r *nat) {
		out[i] = LowerGraph{Layer: r.i32("layer"), K: r.i32("k"), AA: r.float64s("aa"), AO: r.float64s("ao"), Sum: r.float64s("sum")}
	})
	return out
}

// appendLowerGraphs appends the Avro binary of gs (an array of LowerGraph).
func appendLowerGraphs(b []byte, gs []LowerGraph) []byte {
	if len(gs) > 0 {
		b = avrobin.AppendLong(b, int64(len(gs)))
		for i := range gs {
			g := &gs[i]
			b = avrobin.AppendLong(b, int64(g.Layer))
			b = avrobin.AppendLong(b, int64(g.K))
			b = avrobin.AppendPacked(b, g.AA)
			b = avrobin.AppendPacked(b, g.AO)
			b = avrobin.AppendPacked(b, g.Sum)
		}
	}
	return avrobin.AppendLong(b, 0)
}

// lowerGraphs reads an array of LowerGraph; each graph's AA, AO and Sum
// share one allocation.
func (r *binReader) lowerGraphs() []LowerGraph {
	var out []LowerGraph
	r.Array(func() {
		g := LowerGraph{Layer: r.Int(), K: r.Int()}
		aa, ao, sum := r.Raw(), r.Raw(), r.Raw()
		if len(aa)%8 != 0 || len(ao)%8 != 0 || len(sum)%8 != 0 {
			r.Fail()
			return
		}
		if n, m, o := len(aa)/8, len(ao)/8, len(sum)/8; n+m+o > 0 {
			flat := make([]float64, n+m+o)
			if n > 0 {
				g.AA = avrobin.UnpackInto(flat[:n:n], aa)
			}
			if m > 0 {
				g.AO = avrobin.UnpackInto(flat[n:n+m:n+m], ao)
			}
			if o > 0 {
				g.Sum = avrobin.UnpackInto(flat[n+m:], sum)
			}
		}
		out = append(out, g)
	})
	return out
}

// validateLowerGraph is ValidateScored for one compact graph: a layer not
// seen before and not negative, K = turns, K(K−1)/2 entries per matrix, each
// a probability mass in [0, 1] (small round-off allowed); in the sum form
// K(K−1)/2 sums alone, each in [0, 2].
func validateLowerGraph(id string, k int, g *LowerGraph, seen map[int32]bool) error {
	if seen[g.Layer] {
		return invalid(ReasonInvalid, "scored %s: layer %d appears twice", id, g.Layer)
	}
	seen[g.Layer] = true
	if g.Layer < 0 {
		return invalid(ReasonInvalid, "scored %s: negative layer %d", id, g.Layer)
	}
	if int(g.K) != k {
		return invalid(ReasonInvalid, "scored %s: layer %d has K=%d for %d turns", id, g.Layer, g.K, k)
	}
	n := LowerLen(k)
	if g.Summed() {
		if len(g.Sum) != n || len(g.AA) != 0 || len(g.AO) != 0 {
			return invalid(ReasonInvalid, "scored %s: layer %d has %d sum entries (and %d AA, %d AO) below the diagonal, want K(K-1)/2 = %d sums alone", id, g.Layer, len(g.Sum), len(g.AA), len(g.AO), n)
		}
	} else if len(g.AA) != n || len(g.AO) != n {
		return invalid(ReasonInvalid, "scored %s: layer %d has %d AA and %d AO entries below the diagonal, want K(K-1)/2 = %d", id, g.Layer, len(g.AA), len(g.AO), n)
	}
	hi, want := 1+attentionSlack, "a probability mass in [0, 1]"
	if g.Summed() {
		hi, want = 2+2*attentionSlack, "the sum of two probability masses, in [0, 2]"
	}
	for _, m := range [3][]float64{g.AA, g.AO, g.Sum} {
		for i, x := range m {
			if !(x >= -attentionSlack && x <= hi) { // NaN and ±Inf fail too
				j := 1
				for LowerIndex(j+1, 0) <= i {
					j++
				}
				return invalid(ReasonInvalid, "scored %s: layer %d entry [%d,%d] is %v, want %s", id, g.Layer, j, i-LowerIndex(j, 0), x, want)
			}
		}
	}
	return nil
}
