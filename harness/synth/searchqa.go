package synth

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/creditflow/creditflow/schemas"
)

// searchQA builds a search-QA trajectory. The group shares the question (a
// subject from the filler vocabulary) and the gold answer (a capitalized
// made-up name of the answer pool);
// each member searches 1–3 times, and in about 60 % of them one search (the
// informative turn) returns "<subject> is also called <gold>." inside filler
// prose. The prediction is the gold answer in most trajectories that found
// it, another name of the pool otherwise.
func searchQA(r, qr *rand.Rand, t *schemas.Trajectory) Truth {
	subject := pick(qr, entities)
	gold := pick(qr, answers)
	t.Prompt = Tokens("<|user|> answer the question. use <search>query</search> to search. question: what is " +
		subject + " also called? <|assistant|>")
	searches := 1 + r.IntN(3)
	informative := -1
	if r.IntN(5) < 3 {
		informative = r.IntN(searches)
	}
	for s := 0; s < searches; s++ {
		act := "<search>" + subject + " " + text(r, 6) + "</search>"
		var obs string
		if s == informative {
			pre := text(r, r.IntN(40))
			if pre != "" {
				pre += " "
			}
			obs = "<information>" + pre + subject + " is also called " + gold + ". "
			obs += text(r, max(4, 95-len(obs))) + "</information>"
		} else {
			obs = "<information>" + text(r, 82) + "</information>"
		}
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindSearch, Action: Tokens(act), Observation: Tokens(obs)})
	}
	pred := otherAnswer(r, gold)
	if informative >= 0 && r.IntN(5) != 0 {
		pred = gold
	}
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: Tokens("<answer>" + pred + "</answer><|end|>")})
	t.PredAnswer = &pred
	t.GoldAnswers = []string{gold}
	target := fmt.Sprintf(Template, gold)
	a := strings.Index(target, "<answer>") + len("<answer>")
	t.GoldTarget = Tokens(target)
	t.GoldSpan = [2]int32{int32(a), int32(a + len(gold))}
	return Truth{Informative: informative, Key: -1, Answer: gold}
}
