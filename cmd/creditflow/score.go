package main

import (
	"os"

	"github.com/creditflow/creditflow/gpu/model"
)

func init() {
	register("score", "LAPO rows on a model: JSON Lines in, {\"score\":S} out (docs/offline.md)", runScore)
}

// modelFlagHelp describes the --model flags.
const modelFlagHelp = "model folder (config.json + *.safetensors), or a built-in model: \"tiny\" (trained on the synthetic worlds) or \"tiny-random\" (random weights)"

// loadModelFlag opens the model named by --model: "tiny" (or empty) is the
// built-in trained model, "tiny-random" the random-weight one, anything else
// a Hugging Face folder.
func loadModelFlag(dir string) (*model.Model, error) {
	if m, ok := model.Builtin(dir); ok {
		return m, nil
	}
	return model.Load(dir)
}

func runScore(args []string) error {
	fs := newFlagSet("score", `usage: creditflow score [--model DIR] < rows.jsonl > scores.jsonl

Reads JSON Lines on stdin, one row per line:
  {"context":[ids], "target":[ids], "span":[a,b], "temperature":T}
("temperature" is optional, default 1) and writes one line per row, in order:
  {"score":S}
S = mean over k in [a,b) of log p(target[k] | context, target[:k]) (natural log;
null if not finite), with p = softmax(logits / T), the rollout's sampling
distribution. A context too long for the model keeps its rightmost
tokens. Rows read together share their common prefixes. The first malformed
line stops the command with an error naming the line number (exit status 1);
all lines before it have been answered. The format is in docs/offline.md.`)
	var dir *string
	fs.inGroup(groupScorer, func() {
		dir = fs.String("model", "tiny", modelFlagHelp)
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	m, err := loadModelFlag(*dir)
	if err != nil {
		return err
	}
	return model.RunScoreJSONL(m, os.Stdin, os.Stdout)
}
