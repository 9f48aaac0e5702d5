// Package avrobin holds the Avro binary primitives the schemas package's
// direct codecs are written with: zig-zag varint longs and ints, IEEE
// doubles and floats, length-prefixed bytes and strings, ["null", X] union
// branches, blocked arrays, and packed little-endian arrays of fixed-size
// numbers carried in Avro "bytes" (docs/wire-format.md, "Packed arrays").
//
// It knows nothing of creditflow's records. Writers append to a byte slice
// and never fail; Reader is bounded by its input: every length and block
// count must fit in the bytes that remain, and the first problem makes it
// fail (OK false) without panicking, after which reads return zero values.
package avrobin
