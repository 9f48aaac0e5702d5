// Package synth generates deterministic synthetic rollouts for the demo, the
// load tests and the end-to-end tests: search-QA shaped trajectories for LAPO
// and ALFWorld shaped ones for AttnSR, tokenized byte-for-byte for the
// built-in tiny model (ids 0..255 are bytes).
//
// The same seed and index always give the same trajectory, byte for byte.
package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/creditflow/creditflow/schemas"
)

// Shapes of workload.
const (
	SearchQA = "search-qa" // prompt ≈ 250, 1–3 searches of ≈ 60 + 450 tokens, answer ≈ 30 (LAPO)
	ALFWorld = "alfworld"  // prompt ≈ 200, 10–30 steps of ≈ 15 + 40 tokens (AttnSR)
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

var (
	entities = []string{"marie curie", "lisbon", "the danube", "ada lovelace", "mount kenya", "kyoto", "niels bohr",
		"the amazon", "oslo", "rosalind franklin", "lake baikal", "alan turing", "sao paulo", "the atlas mountains",
		"hypatia", "reykjavik", "grace hopper", "the gobi", "emmy noether", "patagonia"}
	fillers = []string{"according to", "records show", "historians note", "in the year", "the archive lists",
		"a survey found", "it is reported that", "sources disagree on", "the encyclopedia says", "notably"}
	actions = []string{"go to shelf", "take mug from", "open drawer", "put apple in", "heat potato with", "look",
		"examine cabinet", "use desklamp", "clean plate with", "cool lettuce with", "go to countertop", "inventory"}
	objects = []string{"1", "2", "3", "4", "fridge 1", "sinkbasin 1", "microwave 1", "drawer 2", "shelf 5", "desk 1"}
)

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
	r := rand.New(rand.NewPCG(c.Seed, uint64(g)<<20|uint64(i)))
	t := schemas.Trajectory{
		TrajectoryID:  fmt.Sprintf("%s-%d", PromptID(g), i),
		PromptID:      PromptID(g),
		GroupSize:     int32(c.GroupSize),
		SampleIndex:   int32(i),
		PolicyVersion: int64(g / 16),
		CreatedAtMs:   c.BaseMs + int64(g*c.GroupSize+i)*c.StepMs,
	}
	temp := float32(1.0)
	t.Temperature = &temp
	if c.Shape == ALFWorld {
		c.alfworld(r, g, &t)
	} else {
		c.searchQA(r, g, &t)
	}
	n := 0
	for _, tu := range t.Turns {
		n += len(tu.Action)
	}
	t.RolloutLogprobs = make([]float32, n)
	for k := range t.RolloutLogprobs {
		t.RolloutLogprobs[k] = -float32(r.ExpFloat64())
	}
	return t
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// text makes roughly n bytes of filler prose.
func text(r *rand.Rand, n int, insert string) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pick(r, fillers))
		b.WriteByte(' ')
		if insert != "" && r.IntN(6) == 0 {
			b.WriteString(insert)
			b.WriteString(". ")
			insert = ""
		} else {
			b.WriteString(pick(r, entities))
			b.WriteString(", ")
		}
	}
	s := b.String()
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// Tokens is the byte tokenization used by the built-in tiny model.
func Tokens(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}

func (c Config) searchQA(r *rand.Rand, g int, t *schemas.Trajectory) {
	qr := rand.New(rand.NewPCG(c.Seed, uint64(g)<<20|0xfffff)) // shared by the group: same prompt and gold
	gold := pick(qr, entities)
	t.Prompt = Tokens("<|user|> Answer the question. Use <search>query</search> to search. " +
		text(qr, 170, "") + " Question: which name fits the clue about " + pick(qr, entities) + "? <|assistant|>")
	searches := 1 + r.IntN(3)
	found := false
	for s := 0; s < searches; s++ {
		hit := r.IntN(3) == 0
		found = found || hit
		ins := ""
		if hit {
			ins = gold
		}
		act := "<think>I should look this up</think><search>" + text(r, 20, "") + "</search>"
		obs := "<information>" + text(r, 425, ins) + "</information>"
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindSearch, Action: Tokens(act), Observation: Tokens(obs)})
	}
	pred := pick(r, entities)
	if found && r.IntN(4) != 0 {
		pred = gold
	}
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: Tokens("<answer>" + pred + "</answer><|end|>")})
	t.PredAnswer = &pred
	t.GoldAnswers = []string{gold}
	target := fmt.Sprintf(Template, gold)
	a := strings.Index(target, "<answer>") + len("<answer>")
	t.GoldTarget = Tokens(target)
	t.GoldSpan = [2]int32{int32(a), int32(a + len(gold))}
}

func (c Config) alfworld(r *rand.Rand, g int, t *schemas.Trajectory) {
	qr := rand.New(rand.NewPCG(c.Seed, uint64(g)<<20|0xfffff))
	goal := pick(qr, actions) + " " + pick(qr, objects)
	t.Prompt = Tokens("<|user|> You are in a household. Your task is to: " + goal + ". " + text(qr, 140, "") + " <|assistant|>")
	steps := 10 + r.IntN(21)
	for s := 0; s < steps; s++ {
		act := pick(r, actions) + " " + pick(r, objects)
		obs := "You see " + text(r, 32, "")
		kind := schemas.KindTool
		if s == steps-1 {
			obs = ""
			kind = schemas.KindAnswer
		}
		t.Turns = append(t.Turns, schemas.Turn{Kind: kind, Action: Tokens(act), Observation: Tokens(obs)})
	}
	reward := 0.0
	if r.IntN(5) < 2 {
		reward = 1
	}
	t.Reward = &reward
}
