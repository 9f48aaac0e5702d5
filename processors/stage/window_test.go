package stage

import (
	"context"
	"testing"
	"time"
)

// The window admits records while their bytes fit, a record larger than the
// whole bound only into an empty window, and waits for releases otherwise.
func TestWindowBoundsBytes(t *testing.T) {
	ctx := context.Background()
	w := newWindow(100, 1)
	if !w.acquire(ctx, 60) || !w.acquire(ctx, 40) {
		t.Fatal("100 bytes did not fit a 100-byte window")
	}
	got := make(chan bool, 1)
	go func() { got <- w.acquire(ctx, 1) }()
	select {
	case <-got:
		t.Fatal("a full window admitted one more byte")
	case <-time.After(50 * time.Millisecond):
	}
	w.release(40)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("acquire failed after a release")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a release did not wake the waiting acquire")
	}
	w.release(60)
	w.release(1)
	if !w.acquire(ctx, 500) {
		t.Fatal("a record larger than the bound did not enter the empty window")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if w.acquire(cctx, 1) {
		t.Fatal("acquire into a window over its bound succeeded")
	}
	w.release(500)
	if w.held != 0 {
		t.Fatalf("window holds %d bytes after every release", w.held)
	}
}

// Up to the minimum of items enter whatever their size; one more waits for
// a release.
func TestWindowMinimumItems(t *testing.T) {
	ctx := context.Background()
	w := newWindow(100, 3)
	for i := 0; i < 3; i++ {
		if !w.acquire(ctx, 500) {
			t.Fatalf("item %d of 3 did not enter a window with a minimum of 3", i+1)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if w.acquire(cctx, 500) {
		t.Fatal("a fourth item over the bound entered")
	}
	w.release(500)
	if !w.acquire(ctx, 500) {
		t.Fatal("an item did not enter after a release")
	}
	if w.held != 1500 || w.items != 3 {
		t.Fatalf("window holds %d bytes in %d items, want 1500 in 3", w.held, w.items)
	}
}
