package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/schemas"
)

// TestUnencodableSampleIsDeadLettered: a sample the stage cannot encode is
// never lost: its member's scored record goes to the dead-letter topic with
// reason unencodable and its original bytes, the group's other samples are
// written, and the partition's offsets are committed past the group.
func TestUnencodableSampleIsDeadLettered(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.CommitInterval = 50 * time.Millisecond
	})
	const groups, size = 3, 3
	recs := randomScored(groups, size, 17)
	victim := recs[4].Trajectory.TrajectoryID
	defer stage.FailEncodingOf(victim)()
	produceScored(t, e.prod, e.cfg.Topics.Scored, recs)

	a, err := stage.NewAdvantageStage(e.cfg, e.prod)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	want := len(recs) - 1
	var dead []schemas.DeadLetter
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		dead = dead[:0]
		for _, rs := range readTopic(t, e.b.Addrs(), e.cfg.Topics.DeadLetters) {
			for _, r := range rs {
				dl, err := schemas.DeadLetters().Decode(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				dead = append(dead, *dl)
			}
		}
		if len(samplesByIDNow(t, e.b.Addrs(), e.cfg.Topics.Samples)) >= want && len(dead) >= 1 && a.Positions()[0].Committable >= int64(len(recs)) {
			break
		}
	}
	committable := a.Positions()[0].Committable
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := samplesByIDNow(t, e.b.Addrs(), e.cfg.Topics.Samples)
	if len(got) != want || got[victim] {
		t.Fatalf("%d samples (victim present: %v), want %d without %s", len(got), got[victim], want, victim)
	}
	if len(dead) != 1 || dead[0].Reason != schemas.ReasonUnencodable || dead[0].Stage != "advantage" {
		t.Fatalf("dead letters %+v: want one %q from the advantage stage", dead, schemas.ReasonUnencodable)
	}
	sc, err := schemas.ScoredRecords().Decode(dead[0].Value)
	if err != nil || sc.Trajectory.TrajectoryID != victim {
		t.Fatalf("dead letter holds %v (%v), want the scored record of %s", sc, err, victim)
	}
	if committable < int64(len(recs)) {
		t.Errorf("partition committable at %d, want past all %d records", committable, len(recs))
	}
}
