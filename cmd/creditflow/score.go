package main

import (
	"fmt"
	"os"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
)

func init() {
	register("score", "LAPO rows on a model: JSON Lines in, {\"score\":S} out (docs/offline.md)", runScore)
}

// modelFlagHelp describes the --model flags.
const modelFlagHelp = "model folder (config.json + *.safetensors), or a built-in model: \"tiny\" (trained on the synthetic worlds) or \"tiny-random\" (random weights)"

// maxContextFlagHelp describes the --max-context flags.
const maxContextFlagHelp = "cap the model's context at this many tokens: longer contexts keep their rightmost tokens, longer attention jobs are refused (0: the model's max_position_embeddings)"

// loadModelFlag opens the model named by --model: "tiny" (or empty) is the
// built-in trained model, "tiny-random" the random-weight one, anything else
// a Hugging Face folder; maxContext > 0 caps its context (--max-context).
func loadModelFlag(dir string, maxContext int) (*cpumodel.Model, error) {
	if maxContext < 0 {
		return nil, usageError{fmt.Errorf("--max-context %d: want 0 (the model's own) or a positive number of tokens", maxContext)}
	}
	if m, ok := cpumodel.Builtin(dir); ok {
		return m.CapContext(maxContext), nil
	}
	return cpumodel.LoadWith(dir, cpumodel.WithMaxContext(maxContext))
}

func runScore(args []string) error {
	fs := newFlagSet("score", `usage: creditflow score [--model DIR] [--max-context N] [--statistic logprob|entropy|kl] < rows.jsonl > scores.jsonl

Reads JSON Lines on stdin, one row per line:
  {"context":[ids], "target":[ids], "span":[a,b], "temperature":T}
("temperature" is optional, default 1) and writes one line per row, in order:
  {"score":S}
S = mean over k in [a,b) of log p(target[k] | context, target[:k]) (natural log;
null if not finite), with p = softmax(logits / T), the rollout's sampling
distribution. A context too long for the model (or for --max-context) keeps
its rightmost tokens. Rows read together share their common prefixes.
--statistic entropy answers the mean entropy (nats) of the distributions that
predict target[a:b]; --statistic kl reads rows with "reference_context":[ids]
as well and answers the mean over the same positions of
KL(p(.|context, target[:k]) || p(.|reference_context, target[:k])). The first malformed
line stops the command with an error naming the line number (exit status 1);
all lines before it have been answered. The format is in docs/offline.md.`)
	var dir, stat *string
	var maxCtx *int
	fs.inGroup(groupScorer, func() {
		dir = fs.String("model", "tiny", modelFlagHelp)
		maxCtx = fs.Int("max-context", 0, maxContextFlagHelp)
		stat = fs.String("statistic", scorer.StatLogProb, "what each row is answered with: logprob (S), entropy or kl (docs/offline.md)")
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	if err := cpumodel.CheckStatistic(*stat); err != nil {
		return usageError{err}
	}
	m, err := loadModelFlag(*dir, *maxCtx)
	if err != nil {
		return err
	}
	return cpumodel.RunScoreJSONLStatistic(m, os.Stdin, os.Stdout, *stat)
}
