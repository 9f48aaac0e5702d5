package stage

// The consumer group each stage runs, for the process's readiness and
// liveness checks (docs/stream.md, "Health") and its lag exporter.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/consumers"
)

// groupRef holds the consumer group of a running stage (shared by copies
// of the stage; made by the stage's constructor).
type groupRef struct {
	g *atomic.Pointer[consumers.Group]
}

func newGroupRef() groupRef { return groupRef{g: new(atomic.Pointer[consumers.Group])} }

func (r *groupRef) store(g *consumers.Group) {
	if r.g == nil { // a stage built without its constructor (tests)
		r.g = new(atomic.Pointer[consumers.Group])
	}
	r.g.Store(g)
}

// Health is the stage's consumer group health; ok is false before Run
// created the group.
func (r *groupRef) Health() (h consumers.Health, ok bool) {
	if r.g == nil {
		return consumers.Health{}, false
	}
	g := r.g.Load()
	if g == nil {
		return consumers.Health{}, false
	}
	return g.Health(), true
}

// ScoreGroup is the consumer group of the score stage and the topic it reads.
func (c Config) ScoreGroup() (group, topic string) {
	return c.GroupID + ".score", c.Topics.Trajectories
}

// AdvantageGroup is the consumer group of the advantage stage and the topic it reads.
func (c Config) AdvantageGroup() (group, topic string) {
	return c.GroupID + ".advantage", c.Topics.Scored
}

// scorerState is how the score stage's scorer calls have gone: the time
// of the last success and of the first failure since (shared by copies of
// the stage).
type scorerState struct {
	mu        sync.Mutex
	failSince time.Time // zero: the last call succeeded (or none failed yet)
	lastErr   string
	lastOK    time.Time // the last call that succeeded
}

// observe records the outcome of one scorer call (a rejection of the
// input or the caller's end is not the scorer's failure).
func (st *scorerState) observe(ctx context.Context, err error) {
	if st == nil || ctx.Err() != nil || (err != nil && scorerRejection(err) != nil) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		st.failSince, st.lastErr, st.lastOK = time.Time{}, "", time.Now()
		return
	}
	if st.failSince.IsZero() {
		st.failSince = time.Now()
	}
	st.lastErr = err.Error()
}

// ScorerFailing reports whether the score stage's scorer calls have been
// failing (every one since the first failure) and for how long, with the
// last error: the processor is then not ready, and its stalled partitions
// do not count against its liveness (a restart does not bring scorers back).
func (s *ScoreStage) ScorerFailing() (failing bool, since time.Duration, lastErr string) {
	if s.scorerState == nil {
		return false, 0, ""
	}
	s.scorerState.mu.Lock()
	defer s.scorerState.mu.Unlock()
	if s.scorerState.failSince.IsZero() {
		return false, 0, ""
	}
	return true, time.Since(s.scorerState.failSince), s.scorerState.lastErr
}

// ScorerAnswered is when a scorer call of the score stage last succeeded
// (zero before the first).
func (s *ScoreStage) ScorerAnswered() time.Time {
	if s.scorerState == nil {
		return time.Time{}
	}
	s.scorerState.mu.Lock()
	defer s.scorerState.mu.Unlock()
	return s.scorerState.lastOK
}
