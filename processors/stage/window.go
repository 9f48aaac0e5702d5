package stage

import (
	"context"
	"sync"
)

// window bounds the bytes a stage holds per partition: the score stage's
// trajectories between reading and writing their output, the advantage
// stage's encoded samples between handing them to the producer and their
// acknowledgement. Up to minItems items enter whatever their size (at least
// one: nothing is refused for its size here, the record limits do that), so
// that items larger than the bound still flow several at a time.
type window struct {
	max, min int
	mu       sync.Mutex
	held     int // bytes
	items    int
	freed    chan struct{} // a release since the last acquire looked
}

func newWindow(maxBytes, minItems int) *window {
	return &window{max: maxBytes, min: max(1, minItems), freed: make(chan struct{}, 1)}
}

// acquire waits until an item of n bytes fits (or fewer than the minimum
// of items are in) and takes it; false when ctx ended first.
func (w *window) acquire(ctx context.Context, n int) bool {
	for {
		w.mu.Lock()
		if w.items < w.min || w.held+n <= w.max {
			w.held += n
			w.items++
			w.mu.Unlock()
			return true
		}
		w.mu.Unlock()
		select {
		case <-w.freed:
		case <-ctx.Done():
			return false
		}
	}
}

// release gives back an item of n bytes.
func (w *window) release(n int) {
	w.mu.Lock()
	w.held -= n
	w.items--
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
