package stage

import "sync"

// bufferPool keeps the buffers of encoded outputs (samples, scored records)
// for reuse once the broker has acknowledged them. A search-QA sample is
// ≈ 17 KB and a stage writes thousands per second; on a machine where fresh
// memory is expensive (every new page faults), writing each into new memory
// cost more than building it. Unlike a sync.Pool the buffers survive garbage
// collections, which the stages run several times a second; at most max
// bytes of free buffers are kept.
type bufferPool struct {
	mu    sync.Mutex
	free  [][]byte
	bytes int
	max   int
}

func newBufferPool(maxBytes int) *bufferPool { return &bufferPool{max: maxBytes} }

// get returns an empty buffer (nil when none is free).
func (p *bufferPool) get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	b := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	p.bytes -= cap(b)
	return b[:0]
}

// put hands back a buffer of get that nothing refers to any more.
func (p *bufferPool) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+cap(b) > p.max {
		return
	}
	p.free = append(p.free, b)
	p.bytes += cap(b)
}

// outputBufferBytes bounds each stage's free output buffers.
const outputBufferBytes = 32 << 20
