// Package safetensors reads and writes the safetensors checkpoint format of
// Hugging Face (an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the data): the tensors of a
// checkpoint folder, read as float32, for the CPU reference transformer
// (package cpumodel), and files of F32, F16 or BF16 tensors for its tests
// and its built-in models.
//
// Guarantees: a header is validated whole before any tensor is read (every
// byte range inside the data section, of the size dtype × shape gives, none
// overlapping another, the header no larger than the file); a truncated or
// malformed file, a tensor missing or of another shape, or a dtype that is
// not a float gives an error naming the file and the tensor; nothing panics
// on input. F16 and BF16 read back exactly as written (Round).
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// maxHeaderBytes bounds the JSON header of a safetensors file (the format's
// own limit is 100 MB).
const maxHeaderBytes = 100 << 20

// dtypeSizes lists the element sizes of the safetensors dtypes. Only F32, F16
// and BF16 can be loaded as weights; the others are accepted in headers so
// that checkpoints carrying extra buffers still open.
var dtypeSizes = map[string]int{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
	"U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
}

// entry is one tensor of a safetensors file.
type entry struct {
	file  string
	name  string
	dtype string
	shape []int
	begin int64       // absolute file offset of the first byte
	end   int64       // absolute file offset one past the last byte
	src   io.ReaderAt // the bytes in memory (an embedded file), nil: read file
}

// Set is the tensors of one or more safetensors files, by name; its tensors
// are read when loaded.
type Set struct {
	entries map[string]*entry
}

// OpenFile reads and validates the header of one safetensors file:
// 8-byte little-endian header length, JSON header, data. Every tensor's byte
// range must lie inside the data section, match dtype × shape, and not overlap
// another tensor.
func OpenFile(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return parse(path, f, st.Size(), nil)
}

// FromBytes is OpenFile of a file held in memory (an embedded checkpoint);
// name stands for its path in errors.
func FromBytes(name string, data []byte) (*Set, error) {
	r := bytes.NewReader(data)
	return parse(name, r, int64(len(data)), r)
}

// parse parses a safetensors file read through r (size bytes); src, when
// not nil, is where its tensors are read later (in memory), otherwise the
// file at path.
func parse(path string, r io.ReaderAt, size int64, src io.ReaderAt) (*Set, error) {
	f := io.NewSectionReader(r, 0, size)
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("safetensors %s: file too short for the 8-byte header length (%d bytes): truncated or not a safetensors file", path, size)
	}
	hlen := binary.LittleEndian.Uint64(lenBuf[:])
	if hlen > maxHeaderBytes || int64(hlen) > size-8 {
		return nil, fmt.Errorf("safetensors %s: header length %d does not fit the file (%d bytes): truncated or corrupt file", path, hlen, size)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: header is not a JSON object: %v", path, err)
	}
	dataStart := int64(8 + hlen)
	dataLen := size - dataStart
	out := &Set{entries: map[string]*entry{}}
	var list []*entry
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Dtype   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: bad header entry: %v", path, name, err)
		}
		esz, ok := dtypeSizes[e.Dtype]
		if !ok {
			return nil, fmt.Errorf("safetensors %s: tensor %q: unknown dtype %q", path, name, e.Dtype)
		}
		if len(e.Offsets) != 2 {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data_offsets must have 2 entries, has %d", path, name, len(e.Offsets))
		}
		b, en := e.Offsets[0], e.Offsets[1]
		if b < 0 || en < b || en > dataLen {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] outside the data section (%d bytes): truncated or corrupt file", path, name, b, en, dataLen)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors %s: tensor %q: negative dimension in shape %v", path, name, e.Shape)
			}
			n *= int64(d)
			if n > dataLen {
				break
			}
		}
		if n*int64(esz) != en-b {
			return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v of %s needs %d bytes but data_offsets give %d", path, name, e.Shape, e.Dtype, n*int64(esz), en-b)
		}
		ent := &entry{file: path, name: name, dtype: e.Dtype, shape: e.Shape, begin: dataStart + b, end: dataStart + en, src: src}
		out.entries[name] = ent
		list = append(list, ent)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].begin < list[j].begin })
	for i := 1; i < len(list); i++ {
		if list[i].begin < list[i-1].end {
			return nil, fmt.Errorf("safetensors %s: tensors %q and %q overlap in the data section", path, list[i-1].name, list[i].name)
		}
	}
	return out, nil
}

// Open is the union of the tensors of all *.safetensors files of a folder
// (a sharded checkpoint's index file is not needed); a tensor in two files
// is an error.
func Open(dir string) (*Set, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.safetensors files in %s", dir)
	}
	sort.Strings(files)
	ts := &Set{entries: map[string]*entry{}}
	for _, p := range files {
		sf, err := OpenFile(p)
		if err != nil {
			return nil, err
		}
		for name, e := range sf.entries {
			if prev, dup := ts.entries[name]; dup {
				return nil, fmt.Errorf("tensor %q appears in both %s and %s", name, prev.file, p)
			}
			ts.entries[name] = e
		}
	}
	return ts, nil
}

// Has reports whether the set holds tensor name.
func (ts *Set) Has(name string) bool { _, ok := ts.entries[name]; return ok }

// Load reads tensor name as float32 (from F32, F16 or BF16) and checks that
// its shape is shape.
func (ts *Set) Load(name string, shape ...int) ([]float32, error) {
	e, ok := ts.entries[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q is missing from the checkpoint", name)
	}
	if !slices.Equal(e.shape, shape) {
		return nil, fmt.Errorf("safetensors %s: tensor %q has shape %v, the config needs %v", e.file, name, e.shape, shape)
	}
	var f io.ReaderAt = e.src
	if f == nil {
		file, err := os.Open(e.file)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", e.file, name, err)
		}
		defer file.Close()
		f = file
	}
	buf := make([]byte, e.end-e.begin)
	if _, err := f.ReadAt(buf, e.begin); err != nil {
		return nil, fmt.Errorf("safetensors %s: tensor %q: reading data: %v (truncated file?)", e.file, name, err)
	}
	out, err := decodeFloats(buf, e.dtype)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: tensor %q: %v", e.file, name, err)
	}
	return out, nil
}

func decodeFloats(buf []byte, dtype string) ([]float32, error) {
	switch dtype {
	case "F32":
		out := make([]float32, len(buf)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		return out, nil
	case "F16":
		out := make([]float32, len(buf)/2)
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(buf[2*i:]))
		}
		return out, nil
	case "BF16":
		out := make([]float32, len(buf)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[2*i:])) << 16)
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s cannot be loaded as weights (want F32, F16 or BF16)", dtype)
}

// f16ToF32 converts an IEEE 754 half-precision value.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: mant × 2^-24
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// f32ToF16 converts to half precision, rounding to nearest even.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // inf / nan
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & ((1 << shift) - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right result
	}
	return sign | uint16(r)
}

// f32ToBF16 converts to bfloat16, rounding to nearest even.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // nan
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Tensor is a named float32 tensor to write with Write.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Round is f written as dtype (F32, F16 or BF16, rounding to nearest even)
// and read back: the value Load gives for it.
func Round(dtype string, f float32) float32 {
	switch dtype {
	case "F16":
		return f16ToF32(f32ToF16(f))
	case "BF16":
		return math.Float32frombits(uint32(f32ToBF16(f)) << 16)
	}
	return f
}

// Write writes tensors to path in the given dtype (F32, F16 or BF16), in
// their order, with the "pt" format metadata.
func Write(path, dtype string, tensors []Tensor) error {
	esz, ok := map[string]int{"F32": 4, "F16": 2, "BF16": 2}[dtype]
	if !ok {
		return fmt.Errorf("safetensors.Write: dtype %q not supported (want F32, F16 or BF16)", dtype)
	}
	type hdrEntry struct {
		Dtype   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range tensors {
		n := int64(len(t.Data)) * int64(esz)
		hdr[t.Name] = hdrEntry{Dtype: dtype, Shape: t.Shape, Offsets: []int64{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	buf := make([]byte, 8, 8+len(hj)+int(off))
	binary.LittleEndian.PutUint64(buf, uint64(len(hj)))
	buf = append(buf, hj...)
	for _, t := range tensors {
		for _, v := range t.Data {
			switch dtype {
			case "F32":
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			case "F16":
				buf = binary.LittleEndian.AppendUint16(buf, f32ToF16(v))
			case "BF16":
				buf = binary.LittleEndian.AppendUint16(buf, f32ToBF16(v))
			}
		}
	}
	return os.WriteFile(path, buf, 0o644)
}
