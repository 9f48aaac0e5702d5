package main

import (
	"os"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

func init() {
	register("compute", "advantages from scored trajectories: JSON Lines in and out (docs/offline.md)", runCompute)
}

func runCompute(args []string) error {
	cfg := credit.DefaultConfig()
	fs := newFlagSet("compute", `usage: creditflow compute [flags] < scored.jsonl > samples.jsonl

Reads scored trajectories (JSON Lines, docs/offline.md) on stdin, groups them by prompt_id and
writes one advantage object per distinct trajectory on stdout. Late and repeated members are
reported on stderr; a malformed line or an unknown field stops the run, naming the line. The math
is documented in docs/method.md.`)
	var direction, statistic *string
	var maxTokens *int
	var tokens *bool
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		maxTokens = fs.Int("max-tokens", offline.DefaultMaxTokens, "reject trajectories longer than this (prompt and all turns)")
		tokens = fs.Bool("tokens", false, "also write per-token arrays: token_advantages, loss_mask, token_rewards (ppo)")
	})
	fs.inGroup(groupCredit, func() {
		fs.StringVar((*string)(&cfg.Method), "method", string(cfg.Method), "credit method: lapo or attnsr")
	})
	fs.inGroup(groupLAPO, func() {
		direction = fs.String("direction", string(vocab.Backward), "how the input's delta was scored, backward or forward (a label; the math is the same)")
		statistic = fs.String("lapo-statistic", string(vocab.LogProb), "the statistic the input's delta was measured with: logprob, entropy or kl (a label, docs/method.md §2.4; a line's \"direction\", e.g. backward:entropy, must agree)")
	})
	apply := creditFlags(fs, &cfg)
	if err := fs.parse(args, true); err != nil {
		return err
	}
	if _, err := vocab.ParseDirection(*direction); err != nil {
		return usagef("--direction %q: use backward or forward", *direction)
	}
	if err := credit.CheckStatistic(vocab.Statistic(*statistic)); err != nil {
		return usagef("--lapo-statistic: %w", err)
	}
	if err := apply(); err != nil {
		return err
	}
	label := schemas.DirectionLabel(*direction, *statistic)
	return offline.Compute(os.Stdin, os.Stdout, os.Stderr, cfg, offline.WithTokens(*tokens), offline.WithMaxTokens(*maxTokens), offline.WithDirection(label))
}
