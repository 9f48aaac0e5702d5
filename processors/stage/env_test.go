package stage_test

import (
	"context"
	"testing"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/scorer"
)

// env is an embedded broker with the pipeline's topics and a producer.
type env struct {
	ctx  context.Context
	b    *broker.Broker
	cfg  stage.Config
	prod *producers.Producer
}

// newEnv starts a broker with the topics of cfg (from stage.DefaultConfig,
// changed by adjust) plus extra topics, everything closed at the end of the test.
func newEnv(t *testing.T, partitions int, adjust func(*stage.Config), extra ...string) *env {
	t.Helper()
	return newEnvState(t, partitions, 1, adjust, extra...)
}

// newEnvState is newEnv with a state topic of statePartitions partitions
// (what a cluster's default gives when operators create the topics).
func newEnvState(t *testing.T, partitions, statePartitions int, adjust func(*stage.Config), extra ...string) *env {
	t.Helper()
	b, err := broker.Start(broker.WithDefaultPartitions(partitions))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := stage.DefaultConfig()
	cfg.Brokers = b.Addrs()
	if adjust != nil {
		adjust(&cfg)
	}
	specs := cfg.TopicSpecs(partitions)
	for i := range specs {
		if specs[i].Name == cfg.Topics.State {
			specs[i].Partitions = statePartitions
		}
	}
	for _, name := range extra {
		specs = append(specs, producers.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: 1})
	}
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, specs...); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	return &env{ctx: ctx, b: b, cfg: cfg, prod: prod}
}

// runStages runs the score stage (when scorer is not nil) and the advantage
// stage until the test ends.
func (e *env) runStages(t *testing.T, src scorer.Scorer) {
	t.Helper()
	if src != nil {
		sc, err := stage.NewScoreStage(e.ctx, e.cfg, src, e.prod)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = sc.Run(e.ctx) }()
	}
	adv, err := stage.NewAdvantageStage(e.cfg, e.prod)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = adv.Run(e.ctx) }()
}
