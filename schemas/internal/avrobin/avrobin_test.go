package avrobin

import (
	"bytes"
	"math"
	"testing"
)

// Known Avro encodings from the specification's examples and IEEE 754.
func TestWritersKnownBytes(t *testing.T) {
	s := "foo"
	f := float32(1)
	for _, c := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"long 0", AppendLong(nil, 0), []byte{0x00}},
		{"long -1", AppendLong(nil, -1), []byte{0x01}},
		{"long 1", AppendLong(nil, 1), []byte{0x02}},
		{"long -64", AppendLong(nil, -64), []byte{0x7f}},
		{"long 64", AppendLong(nil, 64), []byte{0x80, 0x01}},
		{"string foo", AppendString(nil, "foo"), []byte{0x06, 'f', 'o', 'o'}},
		{"bool", AppendBool(AppendBool(nil, true), false), []byte{1, 0}},
		{"double 1", AppendDouble(nil, 1), []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}},
		{"float 1", AppendFloat(nil, 1), []byte{0, 0, 0x80, 0x3f}},
		{"null string", AppendOptString(nil, nil), []byte{0}},
		{"some string", AppendOptString(nil, &s), []byte{2, 0x06, 'f', 'o', 'o'}},
		{"null double", AppendOptDouble(nil, nil), []byte{0}},
		{"some float", AppendOptFloat(nil, &f), []byte{2, 0, 0, 0x80, 0x3f}},
		{"packed int32", AppendPacked(nil, []int32{1, -1}), []byte{16, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}},
		{"packed float64", AppendPacked(nil, []float64{1}), []byte{16, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}},
		{"null packed", AppendOptPacked(nil, nil), []byte{0}},
		{"empty packed", AppendOptPacked(nil, []float32{}), []byte{2, 0}},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: % x, want % x", c.name, c.got, c.want)
		}
	}
}

func TestReaderRoundTrip(t *testing.T) {
	d := 2.5
	b := AppendLong(nil, -123456789)
	b = AppendLong(b, math.MaxInt32)
	b = AppendString(b, "hé")
	b = AppendDouble(b, -0.5)
	b = AppendFloat(b, 0.25)
	b = AppendOptDouble(b, &d)
	b = AppendOptDouble(b, nil)
	b = AppendLong(AppendLong(AppendLong(b, 2), 7), 8) // an array of two ints in one block
	b = AppendLong(b, 0)
	b = AppendLong(AppendLong(AppendLong(b, -1), 1), 9) // a block of one int with its byte size
	b = AppendLong(b, 0)
	r := NewReader(b)
	if v := r.Long(); v != -123456789 {
		t.Fatalf("long %d", v)
	}
	if v := r.Int(); v != math.MaxInt32 {
		t.Fatalf("int %d", v)
	}
	if v := r.Str(); v != "hé" {
		t.Fatalf("string %q", v)
	}
	if v, w := r.Double(), r.Float(); v != -0.5 || w != 0.25 {
		t.Fatalf("double %v float %v", v, w)
	}
	var slab []float64
	if p, q := r.SlabDouble(&slab), r.OptDouble(); p == nil || *p != 2.5 || q != nil {
		t.Fatalf("unions %v %v", p, q)
	}
	var items []int32
	r.Array(func() { items = append(items, r.Int()) })
	r.Array(func() { items = append(items, r.Int()) })
	if len(items) != 3 || items[0] != 7 || items[1] != 8 || items[2] != 9 {
		t.Fatalf("array items %v", items)
	}
	if !r.Done() {
		t.Fatal("the body is not read to its end")
	}
}

// Every malformed body makes the reader fail, without panicking.
func TestReaderFails(t *testing.T) {
	for name, read := range map[string]func(r *Reader){
		"varint without end":    func(r *Reader) { r.Long() },
		"int in six bytes":      func(r *Reader) { r.Int() },
		"int over 32 bits":      func(r *Reader) { r.Int() },
		"bytes past the end":    func(r *Reader) { r.Raw() },
		"double past the end":   func(r *Reader) { r.Double() },
		"union branch 2":        func(r *Reader) { r.Branch() },
		"block count too large": func(r *Reader) { r.Array(func() { r.Long() }) },
		"block size too large":  func(r *Reader) { r.Array(func() { r.Long() }) },
	} {
		body := map[string][]byte{
			"varint without end":    {0x80, 0x80},
			"int in six bytes":      {0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
			"int over 32 bits":      AppendLong(nil, math.MaxInt32+1),
			"bytes past the end":    {0x06, 'a'},
			"double past the end":   {0, 0, 0},
			"union branch 2":        {0x04},
			"block count too large": AppendLong(nil, 100),
			"block size too large":  AppendLong(AppendLong(nil, -1), 50),
		}[name]
		r := NewReader(body)
		read(&r)
		if r.OK() || r.Done() {
			t.Errorf("%s: the reader did not fail", name)
		}
	}
	r := NewReader([]byte{0, 0})
	r.Long()
	if !r.OK() || r.Done() {
		t.Fatal("a trailing byte is not caught by Done")
	}
}

func TestPacked(t *testing.T) {
	v := []float32{1, -2.5, float32(math.Inf(1))}
	b := Pack(v)
	if !bytes.Equal(b, []byte{0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0, 0, 0, 0x80, 0x7f}) {
		t.Fatalf("packed % x", b)
	}
	got, portable := Unpack[float32](b), UnpackPortable(b, make([]float32, 3))
	for i := range v {
		if got[i] != v[i] || portable[i] != v[i] {
			t.Fatalf("element %d: %v and %v, want %v", i, got[i], portable[i], v[i])
		}
	}
	if CanShare {
		w := View[float32](b)
		if len(w) != 3 || w[1] != -2.5 {
			t.Fatalf("view %v", w)
		}
		copy(b, Pack([]float32{7}))
		if w[0] != 7 {
			t.Fatal("a view does not share the bytes")
		}
	}
}
