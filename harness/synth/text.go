package synth

import (
	"math/rand/v2"
	"strings"
)

// Filler vocabulary. Answers and codes are made of syllables (name) and are
// checked never to occur in any of these words, nor they in them.
var (
	entities = []string{"marie curie", "lisbon", "the danube", "ada lovelace", "mount kenya", "kyoto", "niels bohr",
		"the amazon", "oslo", "rosalind franklin", "lake baikal", "alan turing", "sao paulo", "the atlas mountains",
		"hypatia", "reykjavik", "grace hopper", "the gobi", "emmy noether", "patagonia"}
	fillers = []string{"according to", "records show", "historians note", "in the year", "the archive lists",
		"a survey found", "it is reported that", "sources disagree on", "the encyclopedia says", "notably"}
	places = []string{"shelf", "drawer", "cabinet", "countertop", "fridge", "sinkbasin", "microwave", "desk", "dresser",
		"sidetable", "garbagecan", "toaster"}
	verbs   = []string{"go to", "open", "examine", "close", "look at", "search"}
	things  = []string{"a mug", "an apple", "a plate", "a lettuce", "a potato", "a book", "a pen", "a candle", "a towel", "nothing"}
	boxes   = []string{"safe", "locker", "chest", "strongbox", "cashbox"}
	onsets  = []string{"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "sk", "st"}
	vowels  = []string{"a", "e", "i", "o", "u", "ai", "ou"}
	endings = []string{"", "", "n", "r", "x", "th", "l"}
)

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// vocabulary is every fixed string of the worlds, for the never-contains checks.
var vocabulary = strings.Join(entities, "|") + "|" + strings.Join(fillers, "|") + "|" + strings.Join(places, "|") + "|" +
	strings.Join(verbs, "|") + "|" + strings.Join(things, "|") + "|" + strings.Join(boxes, "|") + "|" + fixedText

// fixedText collects the fixed phrases of prompts, actions and observations.
const fixedText = "<|user|> answer the question. use <search>query</search> to search. question: what is also called? " +
	"<|assistant|> <think>I should look this up</think><search></search><information></information> " +
	"is also called <answer></answer><|end|> " + Template +
	" you are in a household. your task is to: unlock the and take what is inside. you see you open the " +
	"inside is a note: the code is unlock with"

// answers is the pool of gold answers and codes: 26 made-up names in capital
// letters, one per initial (everything else the worlds write is lowercase
// but the fixed words of the scoring template, so a name stands out).
// Fixed for every seed.
var answers = func() []string {
	r := rand.New(rand.NewPCG(0x6e616d6573, 26)) // "names"
	out := make([]string, 26)
	for i := range out {
		n := name(r)
		out[i] = string(rune('A'+i)) + strings.ToUpper(n[1:])
	}
	return out
}()

// name makes a pronounceable made-up word of 3 syllables that occurs nowhere
// in the fixed vocabulary, so a string search for it finds only where it was put on purpose.
func name(r *rand.Rand) string {
	for {
		var b strings.Builder
		for s := 0; s < 3; s++ {
			b.WriteString(pick(r, onsets))
			b.WriteString(pick(r, vowels))
		}
		b.WriteString(pick(r, endings))
		n := b.String()
		if !strings.Contains(vocabulary, n) {
			return n
		}
	}
}

// otherAnswer is a name of the pool other than avoid.
func otherAnswer(r *rand.Rand, avoid string) string {
	for {
		if n := pick(r, answers); n != avoid {
			return n
		}
	}
}

// text makes n bytes of filler prose (entities and filler phrases only).
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pick(r, fillers))
		b.WriteByte(' ')
		b.WriteString(pick(r, entities))
		b.WriteString(", ")
	}
	return b.String()[:n]
}
