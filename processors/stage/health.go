package stage

// The consumer group each stage runs, for the process's readiness and
// liveness checks (docs/stream.md, "Health") and its lag exporter.

import (
	"sync/atomic"

	"github.com/creditflow/creditflow/consumers"
)

// groupRef holds the consumer group of a running stage.
type groupRef struct {
	g atomic.Pointer[consumers.Group]
}

// Health is the stage's consumer group health; ok is false before Run
// created the group.
func (r *groupRef) Health() (h consumers.Health, ok bool) {
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
