package avrobin

import (
	"encoding/binary"
	"runtime"
	"unsafe"
)

// Number is a fixed-size number a packed array holds.
type Number interface{ int32 | float32 | float64 }

// HostLittleEndian reports whether the machine stores integers
// little-endian, in which case packed arrays are copied with one memmove
// instead of element by element.
var HostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// CanShare reports whether packed little-endian elements can be read in
// place: the host is little-endian and loads them at any byte offset (a
// packed array starts wherever the Avro body puts it).
var CanShare = HostLittleEndian && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" ||
	runtime.GOARCH == "386" || runtime.GOARCH == "ppc64le")

// sizeOf is the bytes of one E.
func sizeOf[E Number]() int { return int(unsafe.Sizeof(*new(E))) }

// asBytes views a slice of fixed-size numbers as its bytes.
func asBytes[E Number](v []E) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*sizeOf[E]())
}

// View is b's packed little-endian elements in place, sharing b's memory;
// only where CanShare, and b not empty.
func View[E int32 | float32](b []byte) []E {
	return unsafe.Slice((*E)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(*new(E))))
}

// Pack writes v as packed little-endian elements.
func Pack[E Number](v []E) []byte {
	b := make([]byte, len(v)*sizeOf[E]())
	if HostLittleEndian {
		copy(b, asBytes(v))
		return b
	}
	_, _ = binary.Encode(b, binary.LittleEndian, v) // b has exactly the room
	return b
}

// Unpack reads packed little-endian elements; it expects len(b) to be a
// multiple of the element size (checked by the caller), a partial trailing
// element is ignored.
func Unpack[E Number](b []byte) []E {
	return UnpackInto(make([]E, len(b)/sizeOf[E]()), b)
}

// UnpackInto reads len(v) packed little-endian elements from b into v and
// returns v; b holds at least that many.
func UnpackInto[E Number](v []E, b []byte) []E {
	if HostLittleEndian {
		copy(asBytes(v), b)
		return v
	}
	return UnpackPortable(b, v)
}

// UnpackPortable is UnpackInto's element-by-element path for big-endian
// hosts (and for the tests that compare the two).
func UnpackPortable[E Number](b []byte, v []E) []E {
	_, _ = binary.Decode(b[:len(v)*sizeOf[E]()], binary.LittleEndian, v)
	return v
}
