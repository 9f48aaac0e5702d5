package stage

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
)

// A group that times out too small leaves the open members' bytes, as a
// finalized one does: the decoded window's budget follows what is open.
func TestIncompleteGroupReleasesItsBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	cfg.Window = state.WindowConfig{TimeoutMs: 100, MinGroupSize: 2, ClosedMemory: 16}
	p := &partition{a: &AdvantageStage{cfg: cfg}, log: zerolog.Nop(), baseline: nopGauge{},
		out: output{acks: make(chan ack, 16), sem: make(chan struct{}, 16), unacked: newWindow(1<<20, 1)}}
	p.core, _ = state.NewStream("scored", 0, 0, nil, cfg.Window, p.compute)
	handle := func(prompt, id string, off, eventMs int64, n int) []state.Action {
		var acts []state.Action
		rec := consumers.Record{Topic: "scored", Offset: off, Value: make([]byte, n)}
		for _, d := range p.core.Handle(prompt, 3, state.Member[entry]{TrajectoryID: id, Offset: off, EventMs: eventMs,
			Value: entry{rec: rec, scored: &schemas.Scored{}}}) {
			acts = append(acts, d.Action)
			p.act(d)
		}
		return acts
	}
	handle("a", "a0", 0, 1000, 100)
	if p.window.held != 100 {
		t.Fatalf("held %d bytes with one open member of 100", p.window.held)
	}
	if acts := handle("b", "b0", 1, 1200, 30); len(acts) != 2 || acts[0] != state.Incomplete || acts[1] != state.Hold {
		t.Fatalf("decisions %v, want a incomplete, b held", acts)
	}
	if p.window.held != 30 {
		t.Fatalf("held %d bytes after a's group was dead-lettered, want 30 (b0 only)", p.window.held)
	}
	if len(p.out.queued) != 1 || len(p.out.queued[0].msgs) != 1 {
		t.Fatalf("queued %v: want a0's dead letter", p.out.queued)
	}
}
