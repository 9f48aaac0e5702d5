package producers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Chunking: a record too large for one Kafka message is written as n chunk
// messages, with the same topic and key (so the same partition, in order),
// each carrying a slice of the value and three headers:
//
//	creditflow-chunk        "<index>/<count>", index from 0
//	creditflow-chunk-of     lowercase hex SHA-256 of the whole value: the
//	                        record's identity and its checksum
//	creditflow-chunk-bytes  the whole value's length, decimal
//
// The record's own headers are repeated on every chunk. Concatenating the
// values of chunks 0..count-1 gives the record's value. Records that fit in
// one message are written exactly as before, without these headers.
// consumers.Assembler puts chunked records back together; docs/wire-format.md
// describes the format for other clients.
const (
	HeaderChunk      = "creditflow-chunk"
	HeaderChunkOf    = "creditflow-chunk-of"
	HeaderChunkBytes = "creditflow-chunk-bytes"
)

// DefaultChunkBytes is the value bytes carried per chunk (768 KiB): with the
// key, headers and batch framing a chunk stays well under Kafka's default
// message.max.bytes (1,048,588), compressed or not.
const DefaultChunkBytes = 768 << 10

// ChunkInfo describes one chunk message.
type ChunkInfo struct {
	Index, Count int
	Of           string // hex SHA-256 of the whole value
	Bytes        int    // length of the whole value
}

// ParseChunk reads the chunk headers of a message. ok is false for a message
// that is not a chunk (no creditflow-chunk header); err says what is wrong
// with a chunk whose headers are malformed or inconsistent.
func ParseChunk(headers []Header) (info ChunkInfo, ok bool, err error) {
	var pos, of, size string
	for _, h := range headers {
		switch h.Key {
		case HeaderChunk:
			pos, ok = string(h.Value), true
		case HeaderChunkOf:
			of = string(h.Value)
		case HeaderChunkBytes:
			size = string(h.Value)
		}
	}
	if !ok {
		return ChunkInfo{}, false, nil
	}
	i, n, found := strings.Cut(pos, "/")
	if !found {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q is not <index>/<count>", HeaderChunk, pos)
	}
	if info.Index, err = strconv.Atoi(i); err != nil {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q: bad index", HeaderChunk, pos)
	}
	if info.Count, err = strconv.Atoi(n); err != nil {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q: bad count", HeaderChunk, pos)
	}
	if info.Count < 1 || info.Index < 0 || info.Index >= info.Count {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q: index outside [0, count)", HeaderChunk, pos)
	}
	if len(of) != 64 {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q is not a hex SHA-256", HeaderChunkOf, of)
	}
	if _, err := hex.DecodeString(of); err != nil {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q is not a hex SHA-256", HeaderChunkOf, of)
	}
	info.Of = of
	if info.Bytes, err = strconv.Atoi(size); err != nil || info.Bytes < info.Count {
		return ChunkInfo{}, true, fmt.Errorf("header %s=%q is not a length of at least %d bytes", HeaderChunkBytes, size, info.Count)
	}
	return info, true, nil
}

// Split cuts m into chunk messages of at most chunkBytes value bytes each
// (see HeaderChunk). It always chunks, even a value that would fit: callers
// decide when a record needs it. Split is deterministic: the same message
// gives the same chunks.
func Split(m Message, chunkBytes int) []Message {
	if chunkBytes <= 0 {
		chunkBytes = DefaultChunkBytes
	}
	n := (len(m.Value) + chunkBytes - 1) / chunkBytes
	if n == 0 {
		n = 1
	}
	sum := sha256.Sum256(m.Value)
	of := []byte(hex.EncodeToString(sum[:]))
	size := []byte(strconv.Itoa(len(m.Value)))
	out := make([]Message, n)
	for i := range out {
		lo, hi := i*chunkBytes, min((i+1)*chunkBytes, len(m.Value))
		hs := make([]Header, 0, len(m.Headers)+3)
		hs = append(hs, m.Headers...)
		hs = append(hs,
			Header{Key: HeaderChunk, Value: []byte(strconv.Itoa(i) + "/" + strconv.Itoa(n))},
			Header{Key: HeaderChunkOf, Value: of},
			Header{Key: HeaderChunkBytes, Value: size},
		)
		out[i] = Message{Topic: m.Topic, Key: m.Key, Value: m.Value[lo:hi:hi], Headers: hs}
	}
	return out
}

// messageSize is the size Produce accounts a message at against BatchBytes.
func messageSize(m Message) int64 {
	size := int64(len(m.Key) + len(m.Value) + 64)
	for _, h := range m.Headers {
		size += int64(len(h.Key) + len(h.Value) + 8)
	}
	return size
}

// chunkBytes is the chunk size this producer uses: Config.ChunkBytes, cut so
// that a chunk with its key and headers fits BatchBytes. 0 means chunking is
// off.
func (p *Producer) chunkBytes(m Message) int {
	if p.cfg.ChunkBytes < 0 {
		return 0
	}
	c := p.cfg.ChunkBytes
	if c == 0 {
		c = DefaultChunkBytes
	}
	overhead := messageSize(Message{Key: m.Key, Headers: m.Headers}) + 3*(8+24) + 64 + 8 + 32 + 512
	if room := p.cfg.BatchBytes - overhead; int64(c) > room {
		c = int(room)
	}
	if c < 1024 {
		return 0
	}
	return c
}

// wholeRecords marks every chunk of a record as failed when any of its
// chunks failed (owner[i] is the record of message i), so that the retry
// rewrites the record's chunks in order. A chunk that was written is
// "failed" with the error of its record's first failed chunk.
func wholeRecords(werrs []error, owner []int) []error {
	first := map[int]error{}
	for i, e := range werrs {
		if e != nil {
			if _, ok := first[owner[i]]; !ok {
				first[owner[i]] = e
			}
		}
	}
	out := make([]error, len(werrs))
	for i := range werrs {
		out[i] = first[owner[i]]
	}
	return out
}

// failedOwners is owner restricted to the failed messages, in order. Without
// per-message errors (the whole call failed) owner stays as it is.
func failedOwners(werrs []error, owner []int, n int, perMessage bool) []int {
	if !perMessage {
		return owner
	}
	out := make([]int, 0, n)
	for i, e := range werrs {
		if e != nil {
			out = append(out, owner[i])
		}
	}
	return out
}
