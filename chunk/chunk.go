// Package chunk is the chunk format: how a record too large for one Kafka
// message is written as several messages and recognised again. It is a leaf
// both Kafka sides use: producers.Split cuts records with Split, and
// consumers.Assembler reads the headers back with Parse and checks the
// reassembled value with Info.Matches. docs/wire-format.md ("Records larger
// than one message") describes the format for other clients.
//
// A chunked record is n messages with the same topic and key (so the same
// partition, in order), each carrying a slice of the value and three headers:
//
//	creditflow-chunk        "<index>/<count>", index from 0
//	creditflow-chunk-of     lowercase hex SHA-256 of the whole value: the
//	                        record's identity and its checksum
//	creditflow-chunk-bytes  the whole value's length, decimal
//
// The record's own headers are repeated on every chunk. Concatenating the
// values of chunks 0..count-1 gives the record's value. Records that fit in
// one message are written without these headers.
//
// The package holds no state and does no I/O; everything in it is
// deterministic.
package chunk

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The chunk headers.
const (
	HeaderPosition = "creditflow-chunk"       // "<index>/<count>"
	HeaderOf       = "creditflow-chunk-of"    // hex SHA-256 of the whole value
	HeaderBytes    = "creditflow-chunk-bytes" // length of the whole value
)

// DefaultBytes is the value bytes carried per chunk (768 KiB): with the key,
// headers and batch framing a chunk stays well under Kafka's default
// message.max.bytes (1,048,588), compressed or not.
const DefaultBytes = 768 << 10

// Header is one record header, the unit the chunk format is written in. The
// producers and consumers packages use this type for every record header.
type Header struct {
	Key   string
	Value []byte
}

// Info describes one chunk message.
type Info struct {
	Index, Count int
	Of           string // hex SHA-256 of the whole value
	Bytes        int    // length of the whole value
}

// Parse reads the chunk headers of a message. ok is false for a message that
// is not a chunk (no creditflow-chunk header); err says what is wrong with a
// chunk whose headers are malformed or inconsistent.
func Parse(headers []Header) (info Info, ok bool, err error) {
	var pos, of, size string
	for _, h := range headers {
		switch h.Key {
		case HeaderPosition:
			pos, ok = string(h.Value), true
		case HeaderOf:
			of = string(h.Value)
		case HeaderBytes:
			size = string(h.Value)
		}
	}
	if !ok {
		return Info{}, false, nil
	}
	i, n, found := strings.Cut(pos, "/")
	if !found {
		return Info{}, true, fmt.Errorf("header %s=%q is not <index>/<count>", HeaderPosition, pos)
	}
	if info.Index, err = strconv.Atoi(i); err != nil {
		return Info{}, true, fmt.Errorf("header %s=%q: bad index", HeaderPosition, pos)
	}
	if info.Count, err = strconv.Atoi(n); err != nil {
		return Info{}, true, fmt.Errorf("header %s=%q: bad count", HeaderPosition, pos)
	}
	if info.Count < 1 || info.Index < 0 || info.Index >= info.Count {
		return Info{}, true, fmt.Errorf("header %s=%q: index outside [0, count)", HeaderPosition, pos)
	}
	if len(of) != 64 {
		return Info{}, true, fmt.Errorf("header %s=%q is not a hex SHA-256", HeaderOf, of)
	}
	if _, err := hex.DecodeString(of); err != nil {
		return Info{}, true, fmt.Errorf("header %s=%q is not a hex SHA-256", HeaderOf, of)
	}
	info.Of = of
	if info.Bytes, err = strconv.Atoi(size); err != nil || info.Bytes < info.Count {
		return Info{}, true, fmt.Errorf("header %s=%q is not a length of at least %d bytes", HeaderBytes, size, info.Count)
	}
	return info, true, nil
}

// Matches reports whether value is the whole record the chunk headers
// announce: its length and its SHA-256.
func (i Info) Matches(value []byte) bool {
	if len(value) != i.Bytes {
		return false
	}
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:]) == i.Of
}

// Part is one chunk message of a record: a slice of the value and its headers
// (the record's own, then the three chunk headers).
type Part struct {
	Value   []byte
	Headers []Header
}

// Split cuts a record's value into parts of at most size value bytes each
// (DefaultBytes when size <= 0), giving each the record's headers followed by
// the chunk headers. It always chunks, even a value that would fit: callers
// decide when a record needs it. A part's Value shares value's memory and
// cannot be appended into the next part. Split is deterministic: the same
// record gives the same parts.
func Split(value []byte, headers []Header, size int) []Part {
	if size <= 0 {
		size = DefaultBytes
	}
	n := (len(value) + size - 1) / size
	if n == 0 {
		n = 1
	}
	sum := sha256.Sum256(value)
	of := []byte(hex.EncodeToString(sum[:]))
	total := []byte(strconv.Itoa(len(value)))
	out := make([]Part, n)
	for i := range out {
		lo, hi := i*size, min((i+1)*size, len(value))
		hs := make([]Header, 0, len(headers)+3)
		hs = append(hs, headers...)
		hs = append(hs,
			Header{Key: HeaderPosition, Value: []byte(strconv.Itoa(i) + "/" + strconv.Itoa(n))},
			Header{Key: HeaderOf, Value: of},
			Header{Key: HeaderBytes, Value: total},
		)
		out[i] = Part{Value: value[lo:hi:hi], Headers: hs}
	}
	return out
}

// Strip returns headers without the chunk headers: the headers of the
// record the chunks were cut from. It returns nil when nothing is left.
func Strip(headers []Header) []Header {
	var out []Header
	for _, h := range headers {
		if h.Key != HeaderPosition && h.Key != HeaderOf && h.Key != HeaderBytes {
			out = append(out, h)
		}
	}
	return out
}
