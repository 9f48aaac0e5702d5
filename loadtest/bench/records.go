package bench

import (
	"fmt"
	"math/rand/v2"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// benchSize is one trajectory shape of the bench. Sizes are data: add a row
// to benchSizes and every phase runs on it.
type benchSize struct {
	Name   string       // as in --sizes and in the JSON "size" field
	Method vocab.Method // lapo | attnsr
	Tokens int          // tokens per trajectory: observations are padded up to it (0: the synthetic shape as it is)
	Steps  int          // attnsr: steps (turns) per trajectory
	// Trainer: also measure the trainer's end, a Python trainer reading
	// the samples against a bare consumer (bench_trainer.go).
	Trainer bool
}

// benchSizes are the sizes the bench knows, the default (search-QA) first.
// The search-QA size is the synthetic search-QA world (1–3 searches) with its
// observations padded to 1,300 tokens per trajectory, the length of a real
// search-QA rollout: the synthetic worlds themselves are kept short for the
// built-in tiny model (about 450 tokens), which would make the default size
// a third of what the bench is meant to measure.
var benchSizes = []benchSize{
	{Name: "search-qa", Method: vocab.LAPO, Tokens: 1300, Trainer: true},
	{Name: "8k", Method: vocab.LAPO, Tokens: 8 << 10},
	{Name: "32k", Method: vocab.LAPO, Tokens: 32 << 10, Trainer: true},
	{Name: "128k", Method: vocab.LAPO, Tokens: 128 << 10},
	{Name: "attnsr-k30", Method: vocab.AttnSR, Steps: 30},
}

// benchGroupSize is G of every bench workload.
const benchGroupSize = 5

// records is how many trajectories the size runs when the default size runs
// n: about the same bytes for every size (at least 4 groups), so that a quick
// run stays quick.
func (s benchSize) records(n int) int {
	if s.Tokens > 0 {
		n = int(int64(n) * 1300 / int64(s.Tokens))
	}
	if s.Method == vocab.AttnSR {
		n /= 4 // scored records of 30 steps carry six 30x30 graph pairs: ~14x the bytes
	}
	n = n / benchGroupSize * benchGroupSize
	return max(n, 4*benchGroupSize)
}

// trajectory is member i of group g of this size. Deterministic.
func (s benchSize) trajectory(seed uint64, g, i int) schemas.Trajectory {
	gen := synth.Default()
	gen.Seed, gen.GroupSize = seed, benchGroupSize
	if s.Method == vocab.AttnSR {
		gen.Shape = synth.ALFWorld
	}
	t := gen.Trajectory(g, i)
	if s.Steps > 0 {
		forceSteps(&t, s.Steps)
	}
	if s.Tokens > 0 {
		padObservations(&t, s.Tokens, seed<<32^uint64(g*benchGroupSize+i))
	}
	return t
}

// trajectoryTokens counts the prompt, action and observation tokens.
func trajectoryTokens(t *schemas.Trajectory) int {
	n := len(t.Prompt)
	for _, tu := range t.Turns {
		n += len(tu.Action) + len(tu.Observation)
	}
	return n
}

// benchVocabSize is the instant scorer's vocabulary (a Qwen-sized one).
const benchVocabSize = 151936

// padObservations lengthens the observations of the non-final turns until
// the trajectory has target tokens (a long search result or tool output).
// The padding is tokenizer-like: ids of a Zipf distribution over the whole
// vocabulary (a few ids are frequent, most are rare), seeded per trajectory,
// so that the records compress about as real ones do (lz4 ≈ 2×) rather than
// like a repeated phrase of byte tokens (≈ 10× and more), which would make
// the broker's and the compressor's share of every phase unrealistically small.
func padObservations(t *schemas.Trajectory, target int, seed uint64) {
	extra := target - trajectoryTokens(t)
	var obs []int
	for k, tu := range t.Turns {
		if len(tu.Observation) > 0 || k < len(t.Turns)-1 {
			obs = append(obs, k)
		}
	}
	if extra <= 0 || len(obs) == 0 {
		return
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, 0x7061640a)), 1.1, 8, benchVocabSize-1)
	for j, k := range obs {
		n := extra / len(obs)
		if j == 0 {
			n += extra % len(obs)
		}
		o := t.Turns[k].Observation
		grown := make([]int32, len(o), len(o)+n)
		copy(grown, o)
		for len(grown) < len(o)+n {
			grown = append(grown, int32(z.Uint64()))
		}
		t.Turns[k].Observation = grown
	}
}

// forceSteps gives an ALFWorld-shaped trajectory exactly k steps: tool steps
// are repeated (or dropped) before the final answer step, and the rollout
// log-probs are regenerated for the new action tokens.
func forceSteps(t *schemas.Trajectory, k int) {
	last := t.Turns[len(t.Turns)-1]
	tools := t.Turns[:len(t.Turns)-1]
	turns := make([]schemas.Turn, 0, k)
	for j := 0; j < k-1; j++ {
		turns = append(turns, tools[j%len(tools)])
	}
	t.Turns = append(turns, last)
	n := 0
	for _, tu := range t.Turns {
		n += len(tu.Action)
	}
	t.RolloutLogprobs = make([]float32, n)
	for j := range t.RolloutLogprobs {
		t.RolloutLogprobs[j] = -0.05 - float32(j%17)*0.03
	}
}

// benchInput is the pre-generated input of one size: encoded trajectories in
// group order, keyed by prompt id.
type benchInput struct {
	size   benchSize
	keys   [][]byte
	values [][]byte
	tokens int // mean tokens per trajectory
}

func makeInput(s benchSize, n int, seed uint64) (*benchInput, error) {
	in := &benchInput{size: s}
	total := 0
	for g := 0; g < n/benchGroupSize; g++ {
		for i := 0; i < benchGroupSize; i++ {
			t := s.trajectory(seed, g, i)
			total += trajectoryTokens(&t)
			b, err := schemas.Trajectories().Encode(&t)
			if err != nil {
				return nil, fmt.Errorf("encode %s trajectory %s: %w", s.Name, t.TrajectoryID, err)
			}
			in.keys = append(in.keys, []byte(t.PromptID))
			in.values = append(in.values, b)
		}
	}
	if len(in.values) > 0 {
		in.tokens = total / len(in.values)
	}
	return in, nil
}

func meanLen(vs [][]byte) int {
	if len(vs) == 0 {
		return 0
	}
	total := 0
	for _, v := range vs {
		total += len(v)
	}
	return total / len(vs)
}
