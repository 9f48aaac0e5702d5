package schemas

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/creditflow/creditflow/schemas/internal/shape"
	"github.com/linkedin/goavro/v2"
)

// Kafka header names. Producers set HeaderSchema on every record to the full
// Avro name of its schema (for example "io.creditflow.v1.Trajectory"), so
// tools can route records without decoding them. Dead letters also carry the
// reason code and a human-readable detail as headers.
const (
	HeaderSchema = "creditflow-schema"
	HeaderReason = "creditflow-reason"
	HeaderDetail = "creditflow-detail"
	HeaderStage  = "creditflow-stage"
)

// Full Avro names of the record schemas.
const (
	NameTrajectory = "io.creditflow.v1.Trajectory"
	NameScored     = "io.creditflow.v1.Scored"
	NameSample     = "io.creditflow.v1.Sample"
	NameDeadLetter = "io.creditflow.v1.DeadLetter"
	NamePolicy     = "io.creditflow.v1.PolicyAnnouncement"
)

// The embedded schema files (Avro JSON). They are the source of truth for the
// wire format; the Go codecs and the Python examples both read them. Codec.Schema
// returns them. Earlier versions live in v1/ (evolution.go).
var (
	//go:embed trajectory.avsc
	trajectorySchema string
	//go:embed scored.avsc
	scoredSchema string
	//go:embed sample.avsc
	sampleSchema string
	//go:embed dead_letter.avsc
	deadLetterSchema string
	//go:embed policy.avsc
	policySchema string
)

// Single-object encoding framing.
const (
	magic0     = 0xC3
	magic1     = 0x01
	headerSize = 10 // 2 magic bytes + 8-byte fingerprint
)

// DefaultMaxDecodeBytes is the size ceiling a codec applies before decoding
// unless WithMaxBytes says otherwise. It bounds the memory one hostile record
// can cost; per-topic limits (Limits.MaxRecordBytes) are usually lower.
const DefaultMaxDecodeBytes = 64 << 20

// Codec encodes and decodes one record type in Avro single-object encoding.
// Implementations are safe for concurrent use.
type Codec[T any] interface {
	// Encode returns the framed bytes of *v. The same value always gives the
	// same bytes.
	Encode(v *T) ([]byte, error)
	// AppendEncode appends the framed bytes of *v to dst (the bytes Encode
	// returns) and returns the extended slice, so that a caller can reuse
	// one buffer for many records.
	AppendEncode(dst []byte, v *T) ([]byte, error)
	// Decode parses framed bytes. Errors are *DecodeError with reason
	// ReasonUndecodable, ReasonUnknownSchema or ReasonTooLarge. The result
	// does not alias b, unless the codec was built WithSharedInput.
	Decode(b []byte) (*T, error)
	// Name is the schema's full Avro name, e.g. "io.creditflow.v1.Trajectory".
	Name() string
	// Fingerprint is the CRC-64-AVRO fingerprint of the schema's canonical
	// form, in the byte order it has on the wire (little-endian).
	Fingerprint() [8]byte
	// Schema is the Avro schema JSON the codec was built from.
	Schema() string
}

// CodecOption configures a codec.
type CodecOption func(*codecConfig)

type codecConfig struct {
	maxBytes int
	shared   bool
}

// WithMaxBytes sets the largest framed record Decode accepts; larger input
// fails with ReasonTooLarge before any parsing. n <= 0 keeps the default
// (DefaultMaxDecodeBytes).
func WithMaxBytes(n int) CodecOption {
	return func(c *codecConfig) {
		if n > 0 {
			c.maxBytes = n
		}
	}
}

// WithSharedInput lets Decode return a value whose packed token and
// log-prob arrays are views of the bytes it was given instead of copies,
// where the host reads them in place (little-endian, unaligned loads
// allowed: amd64, arm64, 386, ppc64le; elsewhere it copies as usual). The caller must then leave those bytes unchanged, and must not
// write into the value's arrays, for as long as the value is in use. The
// values are the same as without the option; only their memory differs.
// For a consumer that keeps each record's bytes anyway (the advantage
// stage holds a group's records until the group closes), this saves
// copying and collecting a record's token arrays.
func WithSharedInput() CodecOption {
	return func(c *codecConfig) { c.shared = true }
}

// compiled is the option-independent part of a codec, built once per schema.
type compiled struct {
	name   string
	schema string
	avro   *goavro.Codec
	shape  *shape.Shape
	fp     [8]byte
	older  []*writer // earlier versions of the schema a decoder still resolves (evolution.go)
	err    error     // non-nil only if an embedded schema failed to build
}

func compile(name, schema string) *compiled {
	c := &compiled{name: name, schema: schema}
	ac, err := goavro.NewCodec(schema)
	if err != nil {
		c.err = fmt.Errorf("build Avro codec for %s: %w", name, err)
		return c
	}
	c.avro = ac
	binary.LittleEndian.PutUint64(c.fp[:], ac.Rabin)
	if c.shape, err = shape.Compile(ac.CanonicalSchema()); err != nil {
		c.err = fmt.Errorf("compile shape of %s: %w", name, err)
		return c
	}
	c.older, c.err = compileHistory(name, schema)
	return c
}

var (
	compiledTrajectory = sync.OnceValue(func() *compiled { return compile(NameTrajectory, trajectorySchema) })
	compiledScored     = sync.OnceValue(func() *compiled { return compile(NameScored, scoredSchema) })
	compiledSample     = sync.OnceValue(func() *compiled { return compile(NameSample, sampleSchema) })
	compiledDeadLetter = sync.OnceValue(func() *compiled { return compile(NameDeadLetter, deadLetterSchema) })
	compiledPolicy     = sync.OnceValue(func() *compiled { return compile(NamePolicy, policySchema) })
)

func allCompiled() []*compiled {
	return []*compiled{compiledTrajectory(), compiledScored(), compiledSample(), compiledDeadLetter(), compiledPolicy()}
}

type avroCodec[T any] struct {
	*compiled
	maxBytes   int
	shared     bool // decodeBody may return views of its input (WithSharedInput)
	toNative   func(*T) map[string]any
	fromNative func(*nat) *T
	sizeHint   func(*T) int
	appendBody func([]byte, *T) []byte       // a direct encoder that agrees with goavro (nil: the generic path)
	decodeBody func([]byte, bool) (*T, bool) // a direct decoder of checked bodies (true: views of them allowed); false: use the generic path
}

func newCodec[T any](c *compiled, opts []CodecOption, to func(*T) map[string]any, from func(*nat) *T, hint func(*T) int) *avroCodec[T] {
	cfg := codecConfig{maxBytes: DefaultMaxDecodeBytes}
	for _, o := range opts {
		o(&cfg)
	}
	return &avroCodec[T]{compiled: c, maxBytes: cfg.maxBytes, shared: cfg.shared && canShare, toNative: to, fromNative: from, sizeHint: hint}
}

var (
	defaultTrajectories = sync.OnceValue(func() *avroCodec[Trajectory] { return trajectories(nil) })
	defaultScored       = sync.OnceValue(func() *avroCodec[Scored] { return scoredRecords(nil) })
	defaultSamples      = sync.OnceValue(func() *avroCodec[Sample] { return samples(nil) })
	defaultDeadLetters  = sync.OnceValue(func() *avroCodec[DeadLetter] { return deadLetters(nil) })
	defaultPolicies     = sync.OnceValue(func() *avroCodec[PolicyAnnouncement] { return policies(nil) })
)

func trajectories(opts []CodecOption) *avroCodec[Trajectory] {
	c := newCodec(compiledTrajectory(), opts, trajectoryToNative, trajectoryFromNative, trajectorySize)
	if binaryDecodeOK() {
		c.decodeBody = decodeTrajectoryBinary
	}
	if scoredBinaryOK() {
		c.appendBody = appendTrajectory
	}
	return c
}
func scoredRecords(opts []CodecOption) *avroCodec[Scored] {
	c := newCodec(compiledScored(), opts, scoredToNative, scoredFromNative, scoredSize)
	if binaryDecodeOK() {
		c.decodeBody = decodeScoredBinary
	}
	if scoredBinaryOK() {
		c.appendBody = appendScored
	}
	return c
}
func samples(opts []CodecOption) *avroCodec[Sample] {
	c := newCodec(compiledSample(), opts, sampleToNative, sampleFromNative, sampleSize)
	if sampleBinaryOK() {
		c.appendBody = appendSample
	}
	return c
}

var sampleBinaryOK = sync.OnceValue(func() bool { return sampleBinaryAgrees(compiledSample()) })

func deadLetters(opts []CodecOption) *avroCodec[DeadLetter] {
	return newCodec(compiledDeadLetter(), opts, deadLetterToNative, deadLetterFromNative, deadLetterSize)
}

func policies(opts []CodecOption) *avroCodec[PolicyAnnouncement] {
	return newCodec(compiledPolicy(), opts, policyToNative, policyFromNative, policySize)
}

// Policies returns the codec of topic "policy" (policy announcements).
func Policies(opts ...CodecOption) Codec[PolicyAnnouncement] {
	if len(opts) == 0 {
		return defaultPolicies()
	}
	return policies(opts)
}

// Trajectories returns the codec of topic "trajectories".
func Trajectories(opts ...CodecOption) Codec[Trajectory] {
	if len(opts) == 0 {
		return defaultTrajectories()
	}
	return trajectories(opts)
}

// ScoredRecords returns the codec of topic "scored".
func ScoredRecords(opts ...CodecOption) Codec[Scored] {
	if len(opts) == 0 {
		return defaultScored()
	}
	return scoredRecords(opts)
}

// Samples returns the codec of topic "samples".
func Samples(opts ...CodecOption) Codec[Sample] {
	if len(opts) == 0 {
		return defaultSamples()
	}
	return samples(opts)
}

// DeadLetters returns the codec of topic "dead-letters".
func DeadLetters(opts ...CodecOption) Codec[DeadLetter] {
	if len(opts) == 0 {
		return defaultDeadLetters()
	}
	return deadLetters(opts)
}

func (c *avroCodec[T]) Name() string         { return c.name }
func (c *avroCodec[T]) Fingerprint() [8]byte { return c.fp }
func (c *avroCodec[T]) Schema() string       { return c.schema }

func (c *avroCodec[T]) Encode(v *T) ([]byte, error) {
	if v == nil {
		return nil, fmt.Errorf("encode %s: nil record", c.name)
	}
	return c.AppendEncode(make([]byte, 0, headerSize+c.sizeHint(v)), v)
}

func (c *avroCodec[T]) AppendEncode(dst []byte, v *T) (out []byte, err error) {
	if c.err != nil {
		return nil, c.err
	}
	if v == nil {
		return nil, fmt.Errorf("encode %s: nil record", c.name)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("encode %s: internal fault: %v", c.name, r)
		}
	}()
	buf := slices.Grow(dst, headerSize+c.sizeHint(v))
	buf = append(buf, magic0, magic1)
	buf = append(buf, c.fp[:]...)
	if c.appendBody != nil {
		return c.appendBody(buf, v), nil
	}
	buf, err = c.avro.BinaryFromNative(buf, c.toNative(v))
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", c.name, err)
	}
	return buf, nil
}

// tryDecodeBody runs the direct decoder; a fault in it means the generic path.
func (c *avroCodec[T]) tryDecodeBody(body []byte) (v *T, ok bool) {
	defer func() {
		if recover() != nil {
			v, ok = nil, false
		}
	}()
	return c.decodeBody(body, c.shared)
}

func (c *avroCodec[T]) Decode(b []byte) (out *T, err error) {
	if c.err != nil {
		return nil, &DecodeError{Reason: ReasonUndecodable, Detail: c.err.Error()}
	}
	if len(b) > c.maxBytes {
		return nil, &DecodeError{Reason: ReasonTooLarge, Detail: fmt.Sprintf("%s record of %d bytes exceeds the %d-byte limit", c.name, len(b), c.maxBytes)}
	}
	w, err := c.writerOf(b)
	if err != nil {
		return nil, err
	}
	avro, shp := c.avro, c.shape
	if w != nil { // an older writer schema: decode with it, then resolve
		avro, shp = w.avro, w.shape
	}
	body := b[headerSize:]
	// The direct decoder reads the current schema only, and accepts exactly
	// the bodies that pass the shape check and the generic decoder, with the
	// same values (TestBinaryDecodersMatchGoavro on valid and mutated
	// records), so a body it reads needs no shape check; any other body
	// takes the check and the generic path, which name what is wrong.
	if w == nil && c.decodeBody != nil {
		if v, ok := c.tryDecodeBody(body); ok {
			return v, nil
		}
	}
	at := shape.NewPath(c.name)
	end, cerr := shp.Check(body, 0, &at)
	if cerr != nil {
		return nil, undecodable("%v", cerr)
	}
	if end != len(body) {
		return nil, undecodable("%s: %d trailing bytes after the record", c.name, len(body)-end)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, undecodable("%s: decoder fault: %v", c.name, r)
		}
	}()
	native, _, aerr := avro.NativeFromBinary(body)
	if aerr != nil {
		return nil, undecodable("%s: %v", c.name, aerr)
	}
	m, ok := native.(map[string]any)
	if !ok {
		return nil, undecodable("%s: body is not a record", c.name)
	}
	if w != nil {
		w.fill.apply(m)
	}
	n := &nat{m: m, path: c.name}
	v := c.fromNative(n)
	if n.err != nil {
		return nil, n.err
	}
	return v, nil
}

// writerOf checks the header of b and returns the older writer schema its
// fingerprint names, or nil when b was written with the current schema.
func (c *avroCodec[T]) writerOf(b []byte) (*writer, error) {
	if len(b) < headerSize {
		return nil, undecodable("%d bytes is shorter than the %d-byte single-object header", len(b), headerSize)
	}
	if b[0] != magic0 || b[1] != magic1 {
		return nil, undecodable("not Avro single-object encoded: first bytes %02x %02x, want c3 01", b[0], b[1])
	}
	fp := b[2:headerSize]
	if bytes.Equal(fp, c.fp[:]) {
		return nil, nil
	}
	for _, w := range c.older {
		if bytes.Equal(fp, w.fp[:]) {
			return w, nil
		}
	}
	detail := fmt.Sprintf("fingerprint %s is not %s (%s)", hex.EncodeToString(fp), c.name, hex.EncodeToString(c.fp[:]))
	if other := SchemaOf(b); other != "" {
		detail += "; it is " + other
	}
	return nil, &DecodeError{Reason: ReasonUnknownSchema, Detail: detail}
}

// SchemaOf returns the full Avro name of the creditflow schema that framed
// bytes b name in their header, or "" when b is not single-object encoded
// with a known schema. It does not decode the body.
func SchemaOf(b []byte) string {
	if len(b) < headerSize || b[0] != magic0 || b[1] != magic1 {
		return ""
	}
	for _, c := range allCompiled() {
		if c.err != nil {
			continue
		}
		if bytes.Equal(b[2:headerSize], c.fp[:]) {
			return c.name
		}
		for _, w := range c.older {
			if bytes.Equal(b[2:headerSize], w.fp[:]) {
				return c.name
			}
		}
	}
	return ""
}
