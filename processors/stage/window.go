package stage

import (
	"context"
	"sync"
)

// window bounds the record bytes the score stage holds per partition
// between reading a trajectory and writing its output. A record larger than
// the whole bound still enters an empty window, so nothing is refused for
// its size here (the record limits do that).
type window struct {
	max   int
	mu    sync.Mutex
	held  int
	freed chan struct{} // a release since the last acquire looked
}

func newWindow(maxBytes int) *window {
	return &window{max: maxBytes, freed: make(chan struct{}, 1)}
}

// acquire waits until n more bytes fit (or the window is empty) and takes
// them; false when ctx ended first.
func (w *window) acquire(ctx context.Context, n int) bool {
	for {
		w.mu.Lock()
		if w.held == 0 || w.held+n <= w.max {
			w.held += n
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

// release gives back n bytes.
func (w *window) release(n int) {
	w.mu.Lock()
	w.held -= n
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
