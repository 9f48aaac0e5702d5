package consumers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/internal/promreg"
)

// Dead-letter reasons of the reassembly (also listed in docs/wire-format.md).
const (
	// ReasonChunkIncomplete: a chunked record's chunks stopped before the
	// last one (a chunk missing from the sequence, or the record evicted
	// by the MaxSpan or MaxPendingBytes bounds).
	ReasonChunkIncomplete = "chunk_incomplete"
	// ReasonChunkCorrupt: malformed chunk headers, or reassembled bytes
	// whose length or SHA-256 differ from what the headers announce.
	ReasonChunkCorrupt = "chunk_corrupt"
	// ReasonChunkTooLarge: the announced record is larger than
	// MaxRecordBytes (same code as the stages' too_large).
	ReasonChunkTooLarge = "too_large"
)

// ReassemblyConfig bounds the reassembly of chunked records
// (package chunk) for one partition.
type ReassemblyConfig struct {
	// MaxRecordBytes is the largest record reassembled (default 64 MiB);
	// a larger announced size is a dead letter at its first chunk.
	MaxRecordBytes int
	// MaxPendingBytes bounds the bytes held by incomplete records of one
	// partition (default 256 MiB); above it the oldest incomplete record is
	// dead-lettered.
	MaxPendingBytes int
	// MaxSpan is how many offsets a record's chunks may spread over (default
	// 100,000); an incomplete record whose first chunk is further behind the
	// offset being read is dead-lettered.
	MaxSpan int64
	// DeadLetter writes a dead letter for a broken chunked record: rec has
	// the first chunk's key, headers and offset and the bytes received so
	// far. It must return nil only once the dead letter is acknowledged;
	// until then the commit watermark stays before the record's first chunk.
	// nil: broken records are only counted (Assembler.Stats) and do not
	// hold the watermark.
	DeadLetter func(ctx context.Context, rec Record, reason, detail string) error

	metrics *chunkMetrics // set by Group
}

func (c *ReassemblyConfig) defaults() {
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = 64 << 20
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 256 << 20
	}
	if c.MaxSpan <= 0 {
		c.MaxSpan = 100_000
	}
}

// Broken is a chunked record that cannot be put back together.
type Broken struct {
	Record         // first chunk's key, headers, offset; the bytes received so far
	Reason, Detail string
}

// ChunkStats counts what an Assembler did.
type ChunkStats struct {
	Reassembled int // records put back together
	Broken      int // records dead-lettered
	Stray       int // chunks skipped: see Assembler
}

// Assembler puts chunked records of one partition back together.
//
// Guarantees:
//   - Records that are not chunks pass through unchanged, in order.
//   - A chunked record is delivered once its last chunk is read, with the
//     value its producer wrote (length and SHA-256 checked), the first
//     chunk's key and headers (without the chunk headers), and Offset the
//     offset of its last chunk. Delivered offsets strictly increase.
//   - Chunks of different records may interleave. A record's chunks must
//     come in order 0..n-1; a chunk 0 of a record already in progress
//     restarts it (the producer rewrote the whole record after a failure).
//     A gap in the sequence, bad headers, a checksum mismatch, or the span
//     and memory bounds make the record Broken (a dead letter with reason).
//   - A chunk with index > 0 of no record in progress is skipped and
//     counted (ChunkStats.Stray): it is the tail of a record whose first
//     chunk lies before this reader's start offset — a record already
//     consumed, since the commit watermark never passes the first chunk of
//     an unfinished record (Clamp) — or the tail of a partial write that
//     the producer rewrote whole.
//   - Memory is bounded by MaxPendingBytes plus the record being delivered.
//   - Deterministic: the same records in the same order give the same output.
//
// An Assembler is not safe for concurrent use, except Clamp and Committed,
// which may be called from another goroutine.
type Assembler struct {
	cfg   ReassemblyConfig
	open  map[string]*assembly
	held  int // bytes held by open assemblies
	stats ChunkStats

	mu        sync.Mutex
	firsts    map[string]int64 // open records: first chunk's offset
	delivered []span           // chunked records delivered, not yet committed past
}

type assembly struct {
	id    string
	info  chunk.Info
	head  Record
	buf   []byte
	next  int
	first int64
}

// span is a record that holds the commit watermark at first: delivered
// (until a commit passes last) or broken (until its dead letter is released).
type span struct {
	first, last int64
	broken      bool
}

// NewAssembler returns an Assembler with cfg's bounds.
func NewAssembler(cfg ReassemblyConfig) *Assembler {
	cfg.defaults()
	return &Assembler{cfg: cfg, open: map[string]*assembly{}, firsts: map[string]int64{}}
}

// Stats returns the counts so far.
func (a *Assembler) Stats() ChunkStats { return a.stats }

// Add takes the next record of the partition. out is what it completes (a
// plain record, or a reassembled one); broken are the records it found
// broken, to be dead-lettered (their first offsets stay in Clamp until
// Release).
func (a *Assembler) Add(rec Record) (out *Record, broken []Broken) {
	broken = a.evictSpan(rec.Offset)
	info, ok, err := chunk.Parse(rec.Headers)
	if !ok {
		return &rec, broken
	}
	if err != nil {
		b := rec
		b.Headers = chunk.Strip(rec.Headers)
		return nil, append(broken, a.broke(b, ReasonChunkCorrupt, "chunk at offset "+itoa64(rec.Offset)+": "+err.Error()))
	}
	if info.Bytes > a.cfg.MaxRecordBytes {
		if info.Index != 0 {
			a.stats.Stray++
			return nil, broken
		}
		b := rec
		b.Headers = chunk.Strip(rec.Headers)
		return nil, append(broken, a.broke(b, ReasonChunkTooLarge,
			fmt.Sprintf("chunked record of %d bytes exceeds the %d-byte limit (MaxRecordBytes); the dead letter holds its first chunk", info.Bytes, a.cfg.MaxRecordBytes)))
	}
	as := a.open[info.Of]
	if info.Index == 0 {
		if as != nil { // the whole record again: start over
			a.drop(as)
		}
		as = &assembly{id: info.Of, info: info, head: rec, first: rec.Offset, buf: make([]byte, 0, info.Bytes)}
		a.open[info.Of] = as
		a.mu.Lock()
		a.firsts[info.Of] = rec.Offset
		a.mu.Unlock()
	} else if as == nil {
		a.stats.Stray++
		return nil, broken
	}
	switch {
	case info.Index < as.next: // a copy of a chunk already held
		return nil, broken
	case info.Index > as.next || info.Count != as.info.Count || info.Bytes != as.info.Bytes:
		a.drop(as)
		return nil, append(broken, a.broke(as.record(), ReasonChunkIncomplete,
			fmt.Sprintf("chunk %d/%d at offset %d follows chunk %d/%d: the sequence has a gap (a chunk was not written, or was deleted before it was read)",
				info.Index, info.Count, rec.Offset, as.next-1, as.info.Count)))
	}
	if len(as.buf)+len(rec.Value) > as.info.Bytes {
		a.drop(as)
		return nil, append(broken, a.broke(as.record(), ReasonChunkCorrupt,
			fmt.Sprintf("chunks carry more than the announced %d bytes", as.info.Bytes)))
	}
	as.buf = append(as.buf, rec.Value...)
	a.held += len(rec.Value)
	as.next++
	if as.next < as.info.Count {
		return nil, append(broken, a.evictMemory()...)
	}
	a.drop(as)
	if !as.info.Matches(as.buf) {
		return nil, append(broken, a.broke(as.record(), ReasonChunkCorrupt,
			fmt.Sprintf("reassembled %d bytes (announced %d) do not match the announced SHA-256", len(as.buf), as.info.Bytes)))
	}
	done := as.record()
	done.Offset, done.Time = rec.Offset, rec.Time
	a.mu.Lock()
	a.delivered = append(a.delivered, span{first: as.first, last: rec.Offset})
	a.mu.Unlock()
	a.stats.Reassembled++
	return &done, broken
}

func (as *assembly) record() Record {
	r := as.head
	r.Value = as.buf
	r.Headers = chunk.Strip(as.head.Headers)
	return r
}

// drop forgets an open assembly (its first offset stays in Clamp while it
// is broken and not yet released).
func (a *Assembler) drop(as *assembly) {
	delete(a.open, as.id)
	a.held -= len(as.buf)
	a.mu.Lock()
	delete(a.firsts, as.id)
	a.mu.Unlock()
}

// broke records a broken record: its first offset holds the commit
// watermark until Release.
func (a *Assembler) broke(rec Record, reason, detail string) Broken {
	a.stats.Broken++
	a.mu.Lock()
	a.delivered = append(a.delivered, span{first: rec.Offset, last: rec.Offset, broken: true})
	a.mu.Unlock()
	return Broken{Record: rec, Reason: reason, Detail: detail}
}

// Release tells the Assembler that the dead letter of b is acknowledged.
func (a *Assembler) Release(b Broken) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, s := range a.delivered {
		if s.broken && s.first == b.Offset {
			a.delivered = slices.Delete(a.delivered, i, i+1)
			return
		}
	}
}

// evictSpan breaks open records whose first chunk is more than MaxSpan
// offsets behind off, oldest first.
func (a *Assembler) evictSpan(off int64) []Broken {
	var out []Broken
	for _, as := range a.oldestFirst() {
		if off-as.first <= a.cfg.MaxSpan {
			break
		}
		a.drop(as)
		out = append(out, a.broke(as.record(), ReasonChunkIncomplete,
			fmt.Sprintf("chunk %d/%d of the record never came within %d offsets of its first chunk", as.next, as.info.Count, a.cfg.MaxSpan)))
	}
	return out
}

// evictMemory breaks the oldest open records while more than
// MaxPendingBytes are held.
func (a *Assembler) evictMemory() []Broken {
	var out []Broken
	for _, as := range a.oldestFirst() {
		if a.held <= a.cfg.MaxPendingBytes {
			break
		}
		a.drop(as)
		out = append(out, a.broke(as.record(), ReasonChunkIncomplete,
			fmt.Sprintf("incomplete chunked records held more than %d bytes (MaxPendingBytes); the oldest is given up at chunk %d/%d", a.cfg.MaxPendingBytes, as.next, as.info.Count)))
	}
	return out
}

func (a *Assembler) oldestFirst() []*assembly {
	out := make([]*assembly, 0, len(a.open))
	for _, as := range a.open {
		out = append(out, as)
	}
	slices.SortFunc(out, func(x, y *assembly) int { return int(x.first - y.first) })
	return out
}

// Clamp returns the offset that may be committed when the consumer of the
// Assembler's output asks for next: next itself, or the first chunk of a
// record not yet finished (in progress, broken and not yet released, or
// delivered at an offset ≥ next), whichever is smaller. Committing the
// clamped offset makes a restarted reader see every chunk of every record
// it still has to deliver.
func (a *Assembler) Clamp(next int64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := next
	for _, f := range a.firsts {
		c = min(c, f)
	}
	for _, s := range a.delivered {
		if s.last >= next || s.broken {
			c = min(c, s.first)
		}
	}
	return c
}

// Committed tells the Assembler that every delivered record below next is
// finished, so their first chunks no longer hold the watermark.
func (a *Assembler) Committed(next int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.delivered = slices.DeleteFunc(a.delivered, func(s span) bool { return s.last < next && !s.broken })
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// Reassemble wraps a claim so that its handler sees chunked records
// (package chunk) put back together (see Assembler), and its CommitFunc
// never moves the offset past the first chunk of a record not yet finished.
// Broken records go to cfg.DeadLetter from the reading goroutine, in order;
// while a dead letter cannot be written (ctx ended) the record keeps
// holding the watermark, so the partition's next owner reads it again.
func Reassemble(ctx context.Context, claim Claim, commit CommitFunc, cfg ReassemblyConfig) (Claim, CommitFunc, *Assembler) {
	a := NewAssembler(cfg)
	out := make(chan Record, max(cap(claim.Records), 1))
	in := claim.Records
	go func() {
		defer close(out)
		for rec := range in {
			before := a.Stats()
			whole, broken := a.Add(rec)
			cfg.metrics.observe(rec.Topic, before, a.Stats())
			for _, b := range broken {
				if cfg.DeadLetter == nil {
					a.Release(b) // nothing to wait for
					continue
				}
				if err := cfg.DeadLetter(ctx, b.Record, b.Reason, b.Detail); err != nil {
					// Not written: the record holds the watermark for the next owner.
					// Keep draining so the fetcher is not blocked.
					continue
				}
				a.Release(b)
			}
			if whole == nil {
				continue
			}
			select {
			case out <- *whole:
			case <-ctx.Done():
				for range in {
				}
				return
			}
		}
	}()
	claim.Records = out
	wrapped := func(cctx context.Context, next int64) error {
		c := a.Clamp(next)
		if err := commit(cctx, c); err != nil {
			return err
		}
		a.Committed(next)
		return nil
	}
	return claim, wrapped, a
}

// chunkMetrics count what a Group's reassembly did.
type chunkMetrics struct {
	reassembled *prometheus.CounterVec
	stray       *prometheus.CounterVec
}

func newChunkMetrics(reg prometheus.Registerer) (*chunkMetrics, error) {
	m := &chunkMetrics{
		reassembled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_consumer_reassembled_records_total",
			Help: "Records written as chunks and put back together, by topic.",
		}, []string{"topic"}),
		stray: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_consumer_stray_chunks_total",
			Help: "Chunks skipped because their record's first chunk was not read by this claim (already consumed before its start offset, or a rewritten partial write), by topic.",
		}, []string{"topic"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.reassembled, err = promreg.Register(reg, m.reassembled); err != nil {
		return nil, err
	}
	if m.stray, err = promreg.Register(reg, m.stray); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *chunkMetrics) observe(topic string, before, after ChunkStats) {
	if m == nil {
		return
	}
	if d := after.Reassembled - before.Reassembled; d > 0 {
		m.reassembled.WithLabelValues(topic).Add(float64(d))
	}
	if d := after.Stray - before.Stray; d > 0 {
		m.stray.WithLabelValues(topic).Add(float64(d))
	}
}
