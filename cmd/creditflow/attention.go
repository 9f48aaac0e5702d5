package main

import (
	"os"

	"github.com/creditflow/creditflow/scorer/cpumodel"
)

func init() {
	register("attention", "AttnSR step graphs on a model: JSON Lines in, {\"layers\":[…]} out (docs/offline.md)", runAttention)
}

func runAttention(args []string) error {
	fs := newFlagSet("attention", `usage: creditflow attention [--model DIR] [--max-context N] < jobs.jsonl > graphs.jsonl

Reads JSON Lines on stdin, one trajectory per line:
  {"tokens":[ids], "steps":[{"action":[s,e], "observation":[s,e] or null}], "layers":[l...]}
(half-open ranges into tokens; zero-based decoder layers; without "layers" the
default layers of the model's depth, docs/method.md §3.1, each once) and writes one line each:
  {"layers":[{"layer":l, "aa":KxK, "ao":KxK}]}
row j = querying step, column k; zeros where k >= j. The first malformed line
stops the command with an error naming the line number (exit status 1); all
lines before it have been answered. The format is in docs/offline.md.`)
	var dir *string
	var maxCtx *int
	fs.inGroup(groupScorer, func() {
		dir = fs.String("model", "tiny", modelFlagHelp)
		maxCtx = fs.Int("max-context", 0, maxContextFlagHelp)
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	m, err := loadModelFlag(*dir, *maxCtx)
	if err != nil {
		return err
	}
	return cpumodel.RunAttentionJSONL(m, os.Stdin, os.Stdout)
}
