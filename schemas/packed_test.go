package schemas

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestPackedLayout checks the packed helpers against the documented layout
// byte by byte, and the fast (memmove) path against the portable loop.
func TestPackedLayout(t *testing.T) {
	if got := packInt32([]int32{1, 258, -1}); !reflect.DeepEqual(got, []byte{1, 0, 0, 0, 2, 1, 0, 0, 0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("packInt32 = % x", got)
	}
	if got := packFloat32([]float32{1}); !reflect.DeepEqual(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Fatalf("packFloat32(1) = % x", got)
	}
	if got := packFloat64([]float64{1}); !reflect.DeepEqual(got, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}) {
		t.Fatalf("packFloat64(1) = % x", got)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 1000} {
		ids := make([]int32, n)
		f32 := make([]float32, n)
		f64 := make([]float64, n)
		for i := range ids {
			ids[i] = int32(rng.Uint32())
			f32[i] = math.Float32frombits(rng.Uint32())
			f64[i] = math.Float64frombits(rng.Uint64())
		}
		bi, bf, bd := packInt32(ids), packFloat32(f32), packFloat64(f64)
		for i := range ids {
			if binary.LittleEndian.Uint32(bi[4*i:]) != uint32(ids[i]) ||
				binary.LittleEndian.Uint32(bf[4*i:]) != math.Float32bits(f32[i]) ||
				binary.LittleEndian.Uint64(bd[8*i:]) != math.Float64bits(f64[i]) {
				t.Fatalf("element %d not little-endian", i)
			}
		}
		if a, b := unpackInt32(bi), unpackInt32Portable(bi, make([]int32, n)); !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, ids) {
			t.Fatal("unpackInt32 fast and portable paths disagree")
		}
		// Compare float bits (NaN != NaN).
		a32, p32 := unpackFloat32(bf), unpackFloat32Portable(bf, make([]float32, n))
		a64, p64 := unpackFloat64(bd), unpackFloat64Portable(bd, make([]float64, n))
		for i := 0; i < n; i++ {
			if math.Float32bits(a32[i]) != math.Float32bits(f32[i]) || math.Float32bits(p32[i]) != math.Float32bits(f32[i]) ||
				math.Float64bits(a64[i]) != math.Float64bits(f64[i]) || math.Float64bits(p64[i]) != math.Float64bits(f64[i]) {
				t.Fatalf("float element %d differs between paths", i)
			}
		}
	}
}
