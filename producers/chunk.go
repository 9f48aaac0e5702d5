package producers

import "github.com/creditflow/creditflow/chunk"

// Chunking: a record too large for one Kafka message is written as chunk
// messages in the chunk format (package chunk, docs/wire-format.md);
// consumers.Assembler puts them back together.

// Split cuts m into chunk messages of at most chunkBytes value bytes each
// (chunk.Split), with m's topic and key. It always chunks, even a value that
// would fit: callers decide when a record needs it. Split is deterministic:
// the same message gives the same chunks.
func Split(m Message, chunkBytes int) []Message {
	parts := chunk.Split(m.Value, m.Headers, chunkBytes)
	out := make([]Message, len(parts))
	for i, p := range parts {
		out[i] = Message{Topic: m.Topic, Key: m.Key, Value: p.Value, Headers: p.Headers}
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
		c = chunk.DefaultBytes
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
