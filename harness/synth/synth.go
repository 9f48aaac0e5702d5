// Package synth generates deterministic synthetic rollouts with ground truth
// for the demo, the load tests, the end-to-end tests and the training of the
// built-in tiny model: search-QA shaped trajectories for LAPO and ALFWorld
// shaped ones for AttnSR, tokenized byte-for-byte for the built-in tiny model
// (ids 0..255 are bytes).
//
// # Guarantees
//
//   - The same seed and index always give the same trajectory, byte for byte.
//   - Search-QA: 1–3 search turns. A trajectory that found the answer has
//     exactly one observation containing the gold answer string (its
//     informative turn); the other observations, the prompt, the search
//     actions and all filler text never contain it.
//   - ALFWorld: exactly one step's observation reveals the code the final
//     action needs (its key step); no other step, and not the prompt, contains
//     the code. The reward is 1 exactly when the final action uses it.
//
// Truth returns the ground truth (informative turn, key step) of a trajectory;
// it is not part of the record on the wire.
package synth

import (
	"fmt"
	"math/rand/v2"

	"github.com/creditflow/creditflow/schemas"
)

// Shapes of workload.
const (
	SearchQA = "search-qa" // prompt ≈ 100, 1–3 searches of ≈ 30 + 110 tokens, answer ≈ 25 (LAPO)
	ALFWorld = "alfworld"  // prompt ≈ 80, 10–16 steps of ≈ 15 + 15 tokens (AttnSR)
)

// Config sets the workload.
type Config struct {
	Shape     string
	Seed      uint64
	GroupSize int   // trajectories per prompt (G)
	BaseMs    int64 // event time of the first trajectory
	StepMs    int64 // event time between consecutive trajectories
}

// Default is a search-QA workload with G = 5.
func Default() Config {
	return Config{Shape: SearchQA, Seed: 7, GroupSize: 5, BaseMs: 1_767_225_600_000, StepMs: 10}
}

// Template is the LAPO scoring template (docs/method.md §2.1); %s is the gold answer.
const Template = "<think>Now there's enough information to answer</think>\n<answer>%s</answer>"

// Truth is the ground truth of one trajectory: where the evidence is.
type Truth struct {
	// Informative is the index of the search turn whose observation contains
	// the gold answer (search-QA), -1 when no observation does.
	Informative int
	// Key is the index of the step whose observation reveals what the final
	// action needs (ALFWorld), -1 for search-QA.
	Key int
	// Answer is the gold answer (search-QA) or the code (ALFWorld).
	Answer string
}

// Group returns the trajectories of group g (prompt id "q<g>"), G of them.
func (c Config) Group(g int) []schemas.Trajectory {
	out := make([]schemas.Trajectory, c.GroupSize)
	for i := range out {
		out[i] = c.Trajectory(g, i)
	}
	return out
}

// PromptID is the prompt id of group g.
func PromptID(g int) string { return fmt.Sprintf("q%06d", g) }

// Trajectory returns member i of group g.
func (c Config) Trajectory(g, i int) schemas.Trajectory {
	t, _ := c.Generate(g, i)
	return t
}

// Truth returns the ground truth of member i of group g.
func (c Config) Truth(g, i int) Truth {
	_, tr := c.Generate(g, i)
	return tr
}

// Generate returns member i of group g and its ground truth.
func (c Config) Generate(g, i int) (schemas.Trajectory, Truth) {
	r := rand.New(rand.NewPCG(c.Seed, uint64(g)<<20|uint64(i)))
	qr := rand.New(rand.NewPCG(c.Seed, uint64(g)<<20|0xfffff)) // shared by the group: same prompt and answer
	t := schemas.Trajectory{
		TrajectoryID:  fmt.Sprintf("%s-%d", PromptID(g), i),
		PromptID:      PromptID(g),
		GroupSize:     int32(c.GroupSize),
		SampleIndex:   int32(i),
		PolicyVersion: policyVersion(g),
		CreatedAtMs:   c.BaseMs + int64(g*c.GroupSize+i)*c.StepMs,
	}
	temp := float32(1.0)
	t.Temperature = &temp
	var tr Truth
	if c.Shape == ALFWorld {
		tr = alfworld(r, qr, &t)
	} else {
		tr = searchQA(r, qr, &t)
	}
	n := 0
	for _, tu := range t.Turns {
		n += len(tu.Action)
	}
	t.RolloutLogprobs = make([]float32, n)
	for k := range t.RolloutLogprobs {
		t.RolloutLogprobs[k] = -float32(r.ExpFloat64())
	}
	return t, tr
}

// Tokens is the byte tokenization used by the built-in tiny model.
func Tokens(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}

// policyVersion is the policy version of group g's rollouts: a new version
// every 16 groups.
func policyVersion(g int) int64 { return int64(g / 16) }

// NewestPolicyVersion is the policy version of the last of groups groups.
func NewestPolicyVersion(groups int) int64 { return policyVersion(max(0, groups-1)) }
