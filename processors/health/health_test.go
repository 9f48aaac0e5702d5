package health

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
)

// stubGroup is a stage whose consumer-group health and scorer calls are
// set by the test.
type stubGroup struct {
	h           consumers.Health
	scorerSince time.Duration // > 0: every scorer call failed for this long
	answered    time.Time     // the last scorer call that succeeded
}

func (s *stubGroup) Health() (consumers.Health, bool) { return s.h, true }

func (s *stubGroup) ScorerFailing() (bool, time.Duration, string) {
	return s.scorerSince > 0, s.scorerSince, "connection refused"
}

func (s *stubGroup) ScorerAnswered() time.Time { return s.answered }

// TestReadyAndLiveFromProgress: uncommitted input makes the process not
// ready after ten commit intervals (at least 10 s) and not live after
// --liveness-stall; a member outside a generation or a failed broker
// check is not ready; input committed in time is both.
func TestReadyAndLiveFromProgress(t *testing.T) {
	h := New(200*time.Millisecond, time.Minute)
	if r, _ := h.ready(); len(r) == 0 {
		t.Fatal("ready before the first broker check")
	}
	h.SetBrokers(nil)
	s := h.Stage("score", "waiting for a scorer", true)
	if r, _ := h.ready(); len(r) != 1 || !strings.Contains(r[0], "waiting for a scorer") {
		t.Fatalf("waiting stage: %q", r)
	}
	g := &stubGroup{h: consumers.Health{GroupID: "g.score"}}
	s.Start(g)
	if r, _ := h.ready(); len(r) != 1 || !strings.Contains(r[0], "joining consumer group g.score") {
		t.Fatalf("outside a generation: %q", r)
	}
	g.h.Joined, g.h.Partitions = true, []string{"t/0", "t/1"}
	g.h.Uncommitted = []consumers.Stall{{Partition: "t/1", For: 9 * time.Second, Records: 4}}
	if r, _ := h.ready(); len(r) != 0 || len(h.live()) != 0 {
		t.Fatalf("input pending for 9s: not ready %q or not live %q", r, h.live())
	}
	g.h.Uncommitted[0].For = 11 * time.Second
	if r, _ := h.ready(); len(r) != 1 || !strings.Contains(r[0], "t/1 has 4 records uncommitted") {
		t.Fatalf("input pending for 11s: %q", r)
	}
	if l := h.live(); len(l) != 0 {
		t.Fatalf("not live after 11s of a one-minute stall limit: %q", l)
	}
	// A busy scorer that answered a moment ago: one slow record holds
	// back its partition's commit, which is not a reason to be unready.
	g.answered = time.Now()
	if r, _ := h.ready(); len(r) != 0 {
		t.Fatalf("input pending for 11s while the scorer answers: %q", r)
	}
	g.answered = time.Time{}
	g.h.Uncommitted[0].For = 61 * time.Second
	if l := h.live(); len(l) != 1 || !strings.Contains(l[0], "more than 1m0s (--liveness-stall)") {
		t.Fatalf("stalled for 61s: live %q", l)
	}
	h.SetBrokers(errors.New("connection refused"))
	g.h.Uncommitted = nil
	if r, _ := h.ready(); len(r) != 1 || !strings.Contains(r[0], "brokers: connection refused") {
		t.Fatalf("brokers down: %q", r)
	}
	// Stalled because its scorers fail: not ready, but live (a restart
	// does not bring the scorers back).
	h.SetBrokers(nil)
	g.h.Uncommitted = []consumers.Stall{{Partition: "t/1", For: 2 * time.Minute, Records: 4}}
	g.scorerSince = 5 * time.Second
	if r, _ := h.ready(); len(r) != 1 || strings.Contains(r[0], "scorer") {
		t.Fatalf("scorer failing for 5s: %q (want only the uncommitted input)", r)
	}
	g.scorerSince = 2 * time.Minute
	if r, _ := h.ready(); len(r) != 2 || !strings.Contains(r[0], "every scorer call has failed for 2m0s: connection refused") {
		t.Fatalf("scorer failing for 2m: %q", r)
	}
	if l := h.live(); len(l) != 0 {
		t.Fatalf("stalled on failing scorers: not live %q", l)
	}
	// The advantage stage: records held by open group windows are
	// uncommitted for minutes and that is fine; records it does not take
	// are a stall.
	h2 := New(200*time.Millisecond, time.Minute)
	h2.SetBrokers(nil)
	adv := &stubGroup{h: consumers.Health{GroupID: "g.advantage", Joined: true, Partitions: []string{"s/0"},
		Uncommitted: []consumers.Stall{{Partition: "s/0", For: 3 * time.Minute, Records: 7}}}}
	h2.Stage("advantage", "", false).Start(adv)
	if r, _ := h2.ready(); len(r) != 0 || len(h2.live()) != 0 {
		t.Fatalf("advantage stage with open groups: not ready %q or not live %q", r, h2.live())
	}
	adv.h.Waiting = []consumers.Stall{{Partition: "s/0", For: 11 * time.Second, Records: 3}}
	if r, _ := h2.ready(); len(r) != 1 || !strings.Contains(r[0], "s/0 has 3 records waiting that it took none of for 11s") {
		t.Fatalf("advantage stage taking nothing for 11s: %q", r)
	}
	adv.h.Waiting[0].For = 61 * time.Second
	if l := h2.live(); len(l) != 1 {
		t.Fatalf("advantage stage taking nothing for 61s: live %q", l)
	}
	if off := New(time.Second, 0); len(off.live()) != 0 {
		t.Fatal("--liveness-stall 0 failed a check")
	}
}
