package stage

// The consumer group each stage runs, for the process's readiness and
// liveness checks (docs/stream.md, "Health") and its lag exporter.

import (
	"sync/atomic"

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
