package avrobin

import (
	"encoding/binary"
	"math"
)

// Reader reads an Avro binary body from the front. The first problem (a
// varint that does not end, an int over 32 bits or five bytes, a length or
// block that does not fit in what remains, a union branch other than 0 or
// 1) makes it fail: OK turns false and later reads return zero values.
type Reader struct {
	b  []byte
	ok bool
}

// NewReader reads body.
func NewReader(body []byte) Reader { return Reader{b: body, ok: true} }

// OK reports whether every read so far succeeded.
func (r *Reader) OK() bool { return r.ok }

// Fail marks the body as not what the caller expects.
func (r *Reader) Fail() { r.ok = false }

// Done reports whether every read succeeded and the body is used up (no
// trailing bytes).
func (r *Reader) Done() bool { return r.ok && len(r.b) == 0 }

// Long reads an Avro long.
func (r *Reader) Long() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.ok, r.b = false, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Int reads an Avro int: at most five bytes and 32 bits.
func (r *Reader) Int() int32 {
	v, n := binary.Varint(r.b)
	if n <= 0 || n > 5 {
		r.ok, r.b = false, nil
		return 0
	}
	r.b = r.b[n:]
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.ok = false
	}
	return int32(v)
}

// Raw reads Avro bytes (or a string's bytes) as a view of the body.
func (r *Reader) Raw() []byte {
	n := r.Long()
	if n < 0 || n > int64(len(r.b)) {
		r.ok, r.b = false, nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// Str reads an Avro string, copied out of the body.
func (r *Reader) Str() string { return string(r.Raw()) }

// Double reads an Avro double.
func (r *Reader) Double() float64 {
	if len(r.b) < 8 {
		r.ok, r.b = false, nil
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

// Float reads an Avro float.
func (r *Reader) Float() float32 {
	if len(r.b) < 4 {
		r.ok, r.b = false, nil
		return 0
	}
	v := math.Float32frombits(binary.LittleEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

// Branch reads the index of a ["null", X] union: false for null.
func (r *Reader) Branch() bool {
	switch r.Long() {
	case 0:
		return false
	case 1:
		return true
	}
	r.ok = false
	return false
}

// OptDouble reads a ["null", "double"] union.
func (r *Reader) OptDouble() *float64 {
	if !r.Branch() {
		return nil
	}
	v := r.Double()
	return &v
}

// SlabDouble is OptDouble with the value kept in *slab, which has room for
// it (ArrayReserve sized it): one allocation for a block's values.
func (r *Reader) SlabDouble(slab *[]float64) *float64 {
	if !r.Branch() {
		return nil
	}
	*slab = append(*slab, r.Double())
	return &(*slab)[len(*slab)-1]
}

// Array calls item for every element of an array, across its blocks.
func (r *Reader) Array(item func()) { r.ArrayReserve(nil, item) }

// ArrayReserve is Array calling reserve (when not nil) with each block's
// item count before its items, so that the caller can size its slice once.
// The count it passes is at most a third of the bytes left: the items of
// the arrays it serves take at least three bytes each, so a block count
// the body cannot hold reserves no more than its items could fill.
func (r *Reader) ArrayReserve(reserve func(n int), item func()) {
	for r.ok {
		n := r.Long()
		if n == 0 {
			return
		}
		if n < 0 {
			if n == math.MinInt64 {
				r.ok = false
				return
			}
			n = -n
			if size := r.Long(); size < 0 || size > int64(len(r.b)) { // the block's byte size
				r.ok = false
				return
			}
		}
		if n > int64(len(r.b)) { // every item takes at least one byte here
			r.ok = false
			return
		}
		if reserve != nil {
			reserve(int(min(n, int64(len(r.b))/3)))
		}
		for ; n > 0 && r.ok; n-- {
			item()
		}
	}
}
