package stage

import (
	"context"
	"time"

	"github.com/creditflow/creditflow/consumers"
)

// commits is the offset bookkeeping of one partition of the score stage:
// which input offset may be committed, and when.
//
// Rules (tested in commits_test.go):
//   - Only an acknowledged offset is ever committed: the emitter reports
//     the offset after its last output once the broker has acknowledged
//     every output up to it (written in input order, so nothing before it
//     is still in flight).
//   - The committed offset never moves back: an acknowledgment below one
//     already reported is ignored.
//   - An acknowledgment commits at once when a commit interval has passed
//     since the last commit; otherwise the offset waits, and idle fires
//     when the interval is over, so an idle partition commits what it
//     finished instead of waiting for its next record.
//   - A failed commit changes nothing: the offset stays pending and the
//     next acknowledgment, idle tick or close tries again.
//   - close makes a last attempt with a context of its own (the partition's
//     may be over); when the generation is over the broker rejects it and
//     the next owner replays from the last commit.
type commits struct {
	commit   consumers.CommitFunc
	interval time.Duration
	now      func() time.Time

	committed, acked int64     // -1: none yet
	last             time.Time // of the last successful commit
	timer            *time.Timer
}

func newCommits(commit consumers.CommitFunc, interval time.Duration) *commits {
	return &commits{commit: commit, interval: interval, now: time.Now, committed: -1, acked: -1}
}

// acknowledged records that every output before input offset next has been
// acknowledged, and commits next when the commit interval has passed.
func (c *commits) acknowledged(ctx context.Context, next int64) {
	c.acked = max(c.acked, next)
	if now := c.now(); c.acked > c.committed && now.Sub(c.last) >= c.interval {
		c.try(ctx, now)
	}
}

// idle is a channel that fires when an acknowledged offset is still
// uncommitted one commit interval after the last commit (nil when nothing
// waits); onIdle commits it then.
func (c *commits) idle() <-chan time.Time {
	if c.acked <= c.committed {
		return nil
	}
	wait := max(0, c.interval-c.now().Sub(c.last))
	if c.timer == nil {
		c.timer = time.NewTimer(wait)
	} else {
		c.timer.Reset(wait)
	}
	return c.timer.C
}

func (c *commits) onIdle(ctx context.Context) { c.try(ctx, c.now()) }

// close commits what is acknowledged and not yet committed (two seconds at
// most) and stops the idle timer.
func (c *commits) close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.acked > c.committed {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c.try(cctx, c.now())
		cancel()
	}
}

func (c *commits) try(ctx context.Context, now time.Time) {
	if err := c.commit(ctx, c.acked); err == nil {
		c.committed, c.last = c.acked, now
	}
}
