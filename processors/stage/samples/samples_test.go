package samples

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestMaskRuns checks the runs of 1s maskRuns yields against a scan of
// each byte, on random masks with long and short runs.
func TestMaskRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for k := 0; k < 2000; k++ {
		mask := make([]uint8, r.IntN(200))
		for i := 0; i < len(mask); {
			run := 1 + r.IntN(40)
			v := uint8(r.IntN(2))
			for ; run > 0 && i < len(mask); run, i = run-1, i+1 {
				mask[i] = v
			}
		}
		var want, got [][2]int
		for i := 0; i < len(mask); i++ {
			if mask[i] == 1 && (i == 0 || mask[i-1] == 0) {
				want = append(want, [2]int{i, i})
			}
			if mask[i] == 1 {
				want[len(want)-1][1] = i + 1
			}
		}
		for i, e := range maskRuns(mask) {
			got = append(got, [2]int{i, e})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("mask %v: runs %v, want %v", mask, got, want)
		}
	}
}
