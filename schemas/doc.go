// Package schemas defines the records creditflow exchanges on Kafka, their Avro
// schemas, the codecs that turn them into bytes and back, and the validation
// rules a record must pass before it is processed.
//
// # Guarantees
//
//   - Every record on the wire is Avro single-object encoded: the two bytes
//     0xC3 0x01, the 8-byte little-endian CRC-64-AVRO (Rabin) fingerprint of the
//     schema's Parsing Canonical Form, then the Avro binary body. A record
//     therefore names its schema. A decoder reads records written with the
//     current schema or with any earlier version of it (resolved to the
//     current one, new fields at their defaults; see evolution.go and
//     docs/wire-format.md, "Schema evolution") and rejects any other schema
//     with reason [ReasonUnknownSchema].
//   - Encoding is deterministic: the same struct value always gives the same
//     bytes (fields are written in schema order; no map iteration reaches the
//     output). Replays rely on this.
//   - Decoding never panics and never allocates more than a small multiple of
//     the input size: the body is checked against the schema (every length and
//     block count must fit in the bytes that remain, no trailing bytes) before
//     it is materialized, records above the codec's size ceiling are refused
//     with [ReasonTooLarge], and any remaining fault inside the Avro library is
//     turned into a [*DecodeError] with [ReasonUndecodable].
//   - Decoded values never alias the input buffer; the caller may reuse it.
//     The one exception is asked for by name: a codec built
//     [WithSharedInput] may return packed arrays that are views of the
//     input, for a caller that keeps the record's bytes anyway.
//   - Codecs are built once per process and are safe for concurrent use.
//
// Decoding checks the format only. Whether a decoded record makes sense (ids
// present, token ids inside the vocabulary, spans that add up, finite
// rewards, ...) is checked separately by [ValidateTrajectory] and
// [ValidateScored], which return an [*InvalidError] carrying one of the
// Reason* codes. Both error types can be matched with errors.As, and
// [ReasonOf] extracts the code from any error.
//
// # Packed arrays
//
// Token-level arrays are Avro "bytes" holding packed little-endian values:
// token ids as int32 (4 bytes each), log-probs, advantages and token rewards
// as float32 (4 bytes), AttnSR step graphs as row-major float64 (8 bytes), and
// the loss mask as one byte per token. Measured against Avro array<int> /
// array<float> this decodes an order of magnitude faster (see
// BenchmarkDecodeLayout and docs/wire-format.md). A packed field whose length
// is not a multiple of its element size is undecodable.
//
// The direct encoders and decoders of samples, trajectories and scored
// records are written with the Avro binary primitives of
// schemas/internal/avrobin (varints, doubles, unions, blocked arrays,
// packed arrays), which know nothing of the records.
//
// Optional slices that are Avro ["null", "bytes"] unions (for example
// Trajectory.RolloutLogprobs) keep the difference between nil and empty.
// Required packed fields decode to nil when empty.
package schemas
