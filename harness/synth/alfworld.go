package synth

import (
	"math/rand/v2"

	"github.com/creditflow/creditflow/schemas"
)

// alfworld builds an ALFWorld-shaped trajectory: the task (shared by the
// group) is to unlock a box whose code (a capitalized made-up name of the
// answer pool, shared by the group)
// is written on a note in one place. Each member takes 10–16 steps; exactly
// one step's observation (the key step) reads "inside is a note: the <box>
// code is <code>."; the final step is "unlock <box> with X". The reward is 1
// when X is the code (about 60 % of members), 0 otherwise (X is another name).
func alfworld(r, qr *rand.Rand, t *schemas.Trajectory) Truth {
	box := pick(qr, boxes)
	code := pick(qr, answers)
	t.Prompt = Tokens("<|user|> you are in a household. your task is to: unlock the " + box + " and take what is inside. <|assistant|>")
	steps := 10 + r.IntN(7)
	key := r.IntN(steps - 1)
	for s := 0; s < steps-1; s++ {
		place := pick(r, places) + " " + string(rune('1'+r.IntN(6)))
		act := pick(r, verbs) + " " + place
		obs := "you see " + pick(r, things) + "."
		if s == key {
			act = "open " + place
			obs = "you open the " + place + ". inside is a note: the " + box + " code is " + code + "."
		}
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindTool, Action: Tokens(act), Observation: Tokens(obs)})
	}
	used := otherAnswer(r, code)
	reward := 0.0
	if r.IntN(5) < 3 {
		used, reward = code, 1
	}
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: Tokens("unlock " + box + " with " + used)})
	t.Reward = &reward
	return Truth{Informative: -1, Key: key, Answer: code}
}
