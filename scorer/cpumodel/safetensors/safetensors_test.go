package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHalfPrecisionConversions(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {0.5, 0x3800}, {5.9604645e-8, 0x0001}, {6.1035156e-5, 0x0400}, {0, 0}, {float32(math.Inf(1)), 0x7c00}} {
		if got := f32ToF16(c.f); got != c.h {
			t.Errorf("f32ToF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
		if got := f16ToF32(c.h); got != c.f {
			t.Errorf("f16ToF32(%#04x) = %v, want %v", c.h, got, c.f)
		}
	}
	if got := f32ToF16(1 + 1.0/2048); got != 0x3c00 { // tie rounds to even
		t.Errorf("f32ToF16 tie: %#04x", got)
	}
	if got := f32ToBF16(1); got != 0x3f80 {
		t.Errorf("f32ToBF16(1) = %#04x", got)
	}
	if got := f32ToBF16(-3.140625); got != 0xc049 {
		t.Errorf("f32ToBF16(-3.140625) = %#04x", got)
	}
}

// Tensors written in each dtype load back as Round gives them, from a folder,
// a file and memory alike, and a shape other than the one asked for is
// refused naming the tensor.
func TestWriteLoadsRoundedValues(t *testing.T) {
	vals := []float32{1, -2.5, 0.1, 3.14159, 1e-6, 65504, -0.0078125}
	for _, dtype := range []string{"F32", "F16", "BF16"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "model.safetensors")
		ts := []Tensor{{Name: "a", Shape: []int{7}, Data: vals}, {Name: "b", Shape: []int{1, 2}, Data: vals[:2]}}
		if err := Write(path, dtype, ts); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(path)
		if hlen := binary.LittleEndian.Uint64(raw); (8+hlen)%8 != 0 || !bytes.Contains(raw[8:8+hlen], []byte(`"dtype":"`+dtype+`"`)) {
			t.Fatalf("%s: header %q", dtype, raw[8:8+hlen])
		}
		fromDir, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		fromFile, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fromMem, err := FromBytes("mem", raw)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(vals))
		for i, v := range vals {
			want[i] = Round(dtype, v)
		}
		if dtype == "F32" && !slices.Equal(want, vals) {
			t.Fatalf("Round F32 changed %v to %v", vals, want)
		}
		for _, s := range []*Set{fromDir, fromFile, fromMem} {
			got, err := s.Load("a", 7)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: a = %v (%v), want %v", dtype, got, err, want)
			}
			if !s.Has("b") || s.Has("c") {
				t.Fatalf("%s: Has b %v, Has c %v", dtype, s.Has("b"), s.Has("c"))
			}
			if _, err := s.Load("b", 2); err == nil || !strings.Contains(err.Error(), `"b"`) {
				t.Fatalf("%s: b loaded as shape [2]: %v", dtype, err)
			}
			if _, err := s.Load("c"); err == nil || !strings.Contains(err.Error(), "missing") {
				t.Fatalf("%s: missing tensor: %v", dtype, err)
			}
		}
	}
	if Round("F16", 1+1.0/2048) != 1 || Round("BF16", 1) != 1 || math.IsNaN(float64(Round("F16", 65504))) {
		t.Fatal("Round")
	}
	if err := Write(filepath.Join(t.TempDir(), "x.safetensors"), "I8", nil); err == nil {
		t.Fatal("wrote dtype I8")
	}
}
