package stage_test

import (
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// TestIdleScoreStageCommits: a score stage that has written its last
// scored record commits that offset within a few commit intervals even
// when no further record arrives, so a crash does not score it again and
// the lag metric does not show work that is done.
func TestIdleScoreStageCommits(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) { cfg.CommitInterval = time.Second })
	ctx, cfg := e.ctx, e.cfg
	gen := synth.Default()
	trajs := gen.Group(0)
	put := func(i int) {
		t.Helper()
		b, err := schemas.Trajectories().Encode(&trajs[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := e.prod.Produce(ctx, producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(trajs[i].PromptID), Value: b}); err != nil {
			t.Fatal(err)
		}
	}
	committed := func() int64 {
		offs, err := consumers.CommittedOffsets(ctx, cfg.Brokers, kafkasec.Config{}, cfg.GroupID+".score", cfg.Topics.Trajectories, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return offs[0]
	}
	scored := func() int {
		n := 0
		for _, recs := range readTopic(t, cfg.Brokers, cfg.Topics.Scored) {
			n += len(recs)
		}
		return n
	}
	sc, err := stage.NewScoreStage(ctx, cfg, local.New(cpumodel.Tiny()), e.prod)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sc.Run(ctx) }()

	// The first record is committed at once (no commit before it); the
	// second is written within the commit interval after that commit.
	put(0)
	waitFor(t, "the first commit", func() bool { return committed() == 1 })
	put(1)
	waitFor(t, "the second scored record", func() bool { return scored() == 2 })
	deadline := time.Now().Add(5 * cfg.CommitInterval)
	for committed() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the score stage wrote offset 1's output but had committed only %d after %v of idleness", committed(), 5*cfg.CommitInterval)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
