package avrobin

import (
	"encoding/binary"
	"math"
)

// AppendLong appends an Avro long or int: a zig-zag varint.
func AppendLong(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendBool appends an Avro boolean: one byte, 0 or 1.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendDouble appends an Avro double: 8 bytes, little-endian IEEE 754.
func AppendDouble(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

// AppendFloat appends an Avro float: 4 bytes, little-endian IEEE 754.
func AppendFloat(b []byte, v float32) []byte {
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
}

// AppendString appends an Avro string (or bytes): its length, then its bytes.
func AppendString(b []byte, s string) []byte {
	b = AppendLong(b, int64(len(s)))
	return append(b, s...)
}

// The AppendOpt functions append a ["null", X] union: branch 0 for nil,
// branch 1 and the value otherwise.

// AppendOptString appends a ["null", "string"] union.
func AppendOptString(b []byte, v *string) []byte {
	if v == nil {
		return AppendLong(b, 0)
	}
	return AppendString(AppendLong(b, 1), *v)
}

// AppendOptDouble appends a ["null", "double"] union.
func AppendOptDouble(b []byte, v *float64) []byte {
	if v == nil {
		return AppendLong(b, 0)
	}
	return AppendDouble(AppendLong(b, 1), *v)
}

// AppendOptFloat appends a ["null", "float"] union.
func AppendOptFloat(b []byte, v *float32) []byte {
	if v == nil {
		return AppendLong(b, 0)
	}
	return AppendFloat(AppendLong(b, 1), *v)
}

// AppendPacked appends v as Avro bytes of packed little-endian elements.
func AppendPacked[E Number](b []byte, v []E) []byte {
	b = AppendLong(b, int64(len(v)*sizeOf[E]()))
	if HostLittleEndian {
		return append(b, asBytes(v)...)
	}
	return append(b, Pack(v)...)
}

// AppendOptPacked appends a ["null", "bytes"] union of packed float32s,
// keeping nil (null) apart from empty.
func AppendOptPacked(b []byte, v []float32) []byte {
	if v == nil {
		return AppendLong(b, 0)
	}
	return AppendPacked(AppendLong(b, 1), v)
}
