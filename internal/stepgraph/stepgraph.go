// Package stepgraph is the compact form of an AttnSR step graph, shared by
// the scorer protocol's lower-graphs answer and the scored record
// (docs/wire-format.md, "Scored"; docs/scorer-protocol.md, "Lower graphs"):
// the entries below each diagonal only, which are all that AttnSR reads
// (docs/method.md §3.1–§3.2: the backtrack reads G[j,k] for k < j, the
// focus mass the terminal row left of the diagonal), and where that is
// exact, only their sum G_AA + G_AO (the sum form): AttnSR reads G_AA and
// G_AO only as G = 0.5·G_AA + 0.5·G_AO and as G_AA + G_AO.
//
// Both ends cut a graph with the same rule (Cut), so a scorer that answers
// in this form and a client that cuts a K×K answer itself produce the same
// bits.
package stepgraph

import "math"

// Lower is one layer's step graph with only its entries below the diagonal,
// row by row, row j (the querying step) holding columns 0..j−1, so that
// entry [j,k] (k < j) is at Index(j, k). It holds either AA and AO,
// K(K−1)/2 values each, or (the sum form) only Sum, their entry-by-entry
// sums, with AA and AO empty. Its values are those of the K×K graph it
// stands for, bit for bit.
type Lower struct {
	Layer int32
	K     int32
	AA    []float64
	AO    []float64
	Sum   []float64
}

// Summed reports whether g is in the sum form.
func (g *Lower) Summed() bool { return len(g.Sum) > 0 }

// Index is the position of entry [j,k], k < j, of a graph below its
// diagonal: j(j−1)/2 + k.
func Index(j, k int) int { return j*(j-1)/2 + k }

// Len is the number of entries below the diagonal of a K×K graph.
func Len(k int) int { return k * (k - 1) / 2 }

// SumExact reports whether the entry pairs aa[i], ao[i] may be carried as
// their sums: each is a mass in [0, 1] (so that a graph is accepted or
// refused exactly as the pair would be) and 0.5·(aa+ao) has the bits of
// 0.5·aa + 0.5·ao (it has, unless halving underflows into the subnormals).
func SumExact(aa, ao []float64) bool {
	if len(aa) != len(ao) {
		return false
	}
	for i, a := range aa {
		b := ao[i]
		if !(a >= 0 && a <= 1 && b >= 0 && b <= 1) { // NaN fails too
			return false
		}
		if math.Float64bits(0.5*(a+b)) != math.Float64bits(float64(0.5*a+0.5*b)) {
			return false
		}
	}
	return true
}

// Cut is the K×K graph (aa, ao) of layer below its diagonal, K = len(aa):
// its two halves in one allocation, or their sums in the first half's
// memory where SumExact allows. A row shorter than its place needs (which a
// scorer should never send) leaves the rest of its entries 0.
func Cut(layer int, aa, ao [][]float64) Lower {
	k := len(aa)
	n := Len(k)
	flat := make([]float64, 2*n)
	la, lo := flat[:n:n], flat[n:]
	for j := 1; j < k; j++ {
		o := Index(j, 0)
		copy(la[o:o+j], aa[j])
		if j < len(ao) {
			copy(lo[o:o+j], ao[j])
		}
	}
	if n > 0 && SumExact(la, lo) {
		for j := range la {
			la[j] += lo[j]
		}
		return Lower{Layer: int32(layer), K: int32(k), Sum: la}
	}
	return Lower{Layer: int32(layer), K: int32(k), AA: la, AO: lo}
}
