package stepgraph

import (
	"math"
	"reflect"
	"testing"
)

// Cut keeps the entries below the diagonal, row by row, and sums them
// exactly when every pair is a mass whose halved sum has the bits of the
// sum of its halves.
func TestCut(t *testing.T) {
	aa := [][]float64{{9, 9, 9}, {0.25, 9, 9}, {0.5, 0.125, 9}}
	ao := [][]float64{{9, 9, 9}, {0.5, 9, 9}, {0.25, 0.0625, 9}}
	g := Cut(4, aa, ao)
	want := Lower{Layer: 4, K: 3, Sum: []float64{0.75, 0.75, 0.1875}}
	if !reflect.DeepEqual(g, want) || !g.Summed() {
		t.Fatalf("Cut = %+v, want %+v", g, want)
	}
	if Index(2, 1) != 2 || Len(3) != 3 || Len(30) != 435 {
		t.Fatalf("Index(2,1) = %d, Len(3) = %d, Len(30) = %d", Index(2, 1), Len(3), Len(30))
	}
	// Halving the smallest subnormal loses it: 0.5·(s+s) = s but 0.5·s + 0.5·s = 0.
	s := math.SmallestNonzeroFloat64
	ao[2][1] = s
	aa[2][1] = s
	g = Cut(4, aa, ao)
	if g.Summed() || !reflect.DeepEqual(g.AA, []float64{0.25, 0.5, s}) || !reflect.DeepEqual(g.AO, []float64{0.5, 0.25, s}) {
		t.Fatalf("with a subnormal pair: %+v, want the pair form", g)
	}
	// A mass above 1 keeps the pair form too; so does a graph with no entries.
	aa[2][1], ao[2][1] = 1.5, 0
	if g = Cut(4, aa, ao); g.Summed() {
		t.Fatalf("with a mass of 1.5: %+v, want the pair form", g)
	}
	if g = Cut(1, [][]float64{{0.5}}, [][]float64{{0.5}}); g.Summed() || len(g.AA)+len(g.AO) != 0 || g.K != 1 {
		t.Fatalf("K = 1: %+v", g)
	}
	if SumExact([]float64{0.5}, []float64{0.5, 0.1}) {
		t.Fatal("SumExact of different lengths")
	}
}
