package stage

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// commitLog is a partition's commit function that records what it was
// asked to commit and fails while fail is set.
type commitLog struct {
	calls []int64
	fail  bool
}

func (l *commitLog) commit(_ context.Context, next int64) error {
	l.calls = append(l.calls, next)
	if l.fail {
		return errors.New("generation over")
	}
	return nil
}

// bookAt is a bookkeeper on l with a clock the test moves.
func bookAt(l *commitLog, interval time.Duration) (*commits, *time.Time) {
	c := newCommits(l.commit, interval)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	return c, &now
}

func TestCommitsOnlyAcknowledgedOffsets(t *testing.T) {
	ctx := context.Background()
	l := &commitLog{}
	c, _ := bookAt(l, time.Second)
	if c.idle() != nil {
		t.Fatal("nothing acknowledged, yet the idle timer is armed")
	}
	c.close()
	if len(l.calls) != 0 {
		t.Fatalf("commits %v before any acknowledgment", l.calls)
	}
	c, _ = bookAt(l, time.Second)
	c.acknowledged(ctx, 5) // the first acknowledgment: no commit before it, so at once
	if want := []int64{5}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
	if c.idle() != nil {
		t.Fatal("everything acknowledged is committed, yet the idle timer is armed")
	}
	c.close()
	if want := []int64{5}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("close committed again: %v", l.calls)
	}
}

func TestCommitsWaitForTheInterval(t *testing.T) {
	ctx := context.Background()
	l := &commitLog{}
	c, now := bookAt(l, time.Second)
	c.acknowledged(ctx, 1)
	*now = now.Add(300 * time.Millisecond)
	c.acknowledged(ctx, 4)
	c.acknowledged(ctx, 9)
	if want := []int64{1}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("within the interval: commits %v, want %v", l.calls, want)
	}
	if c.idle() == nil {
		t.Fatal("an acknowledged offset waits, yet no idle timer")
	}
	*now = now.Add(700 * time.Millisecond) // one interval after the first commit
	c.acknowledged(ctx, 12)
	if want := []int64{1, 12}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("after the interval: commits %v, want %v", l.calls, want)
	}
}

func TestCommitsNeverMoveBack(t *testing.T) {
	ctx := context.Background()
	l := &commitLog{}
	c, now := bookAt(l, time.Second)
	c.acknowledged(ctx, 10)
	*now = now.Add(2 * time.Second)
	c.acknowledged(ctx, 7) // below what was acknowledged: ignored
	if want := []int64{10}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
	c.acknowledged(ctx, 11)
	if want := []int64{10, 11}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
}

func TestCommitsIdlePartition(t *testing.T) {
	ctx := context.Background()
	l := &commitLog{}
	c, _ := bookAt(l, 20*time.Millisecond) // the clock stands still; the idle timer runs on the real one
	c.acknowledged(ctx, 3)
	c.acknowledged(ctx, 6) // within the interval: waits
	if want := []int64{3}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
	select {
	case <-c.idle():
		c.onIdle(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the idle timer did not fire")
	}
	if want := []int64{3, 6}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("after idle: commits %v, want %v", l.calls, want)
	}
	if c.idle() != nil {
		t.Fatal("idle armed with nothing left to commit")
	}
	c.close()
}

func TestCommitsRetryAfterAFailure(t *testing.T) {
	ctx := context.Background()
	l := &commitLog{fail: true}
	c, now := bookAt(l, time.Second)
	c.acknowledged(ctx, 2) // fails: still pending
	if c.idle() == nil {
		t.Fatal("a failed commit left nothing pending")
	}
	c.onIdle(ctx) // fails again
	l.fail = false
	*now = now.Add(100 * time.Millisecond)
	c.acknowledged(ctx, 5) // no successful commit yet: the interval counts from none, so at once
	if want := []int64{2, 2, 5}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
	// A pending offset whose commit failed is tried once more on close.
	*now = now.Add(100 * time.Millisecond)
	c.acknowledged(ctx, 8) // within the interval: waits
	c.close()
	if want := []int64{2, 2, 5, 8}; !reflect.DeepEqual(l.calls, want) {
		t.Fatalf("commits %v, want %v", l.calls, want)
	}
	// close after a failure: one more try, and a failure there is left to
	// the next owner (it replays from the last commit).
	l2 := &commitLog{}
	c2, now2 := bookAt(l2, time.Second)
	c2.acknowledged(ctx, 1)
	*now2 = now2.Add(10 * time.Millisecond)
	c2.acknowledged(ctx, 4)
	l2.fail = true
	c2.close()
	if want := []int64{1, 4}; !reflect.DeepEqual(l2.calls, want) {
		t.Fatalf("commits %v, want %v", l2.calls, want)
	}
	if c2.committed != 1 {
		t.Fatalf("committed %d after a rejected last commit, want 1", c2.committed)
	}
}
