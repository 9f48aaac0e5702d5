package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/offline"
)

func init() {
	register("compute", "advantages from scored trajectories: JSON Lines in and out (SPEC §5.1)", runCompute)
}

func runCompute(args []string) error {
	cfg := credit.DefaultConfig()
	fs := flag.NewFlagSet("compute", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: creditflow compute [flags] < scored.jsonl > samples.jsonl\n\n"+
			"Reads scored trajectories (JSON Lines, SPEC §5.1) on stdin, groups them by prompt_id and\n"+
			"writes one advantage object per distinct trajectory on stdout. Late and repeated members are\n"+
			"reported on stderr. The math is documented in docs/method.md.\n\nflags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Method, "method", cfg.Method, "credit method: lapo or attnsr")
	direction := fs.String("direction", "backward", "lapo: how the input's delta was scored, backward or forward (a label; the math is the same)")
	apply := creditFlags(fs, &cfg)
	maxTokens := fs.Int("max-tokens", offline.DefaultMaxTokens, "reject trajectories longer than this (prompt and all turns)")
	tokens := fs.Bool("tokens", false, "also write per-token arrays: token_advantages, loss_mask, token_rewards (ppo)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: input is read from stdin", fs.Args())
	}
	if *direction != "backward" && *direction != "forward" {
		return fmt.Errorf("--direction %q: use backward or forward", *direction)
	}
	if err := apply(); err != nil {
		return err
	}
	return offline.Compute(os.Stdin, os.Stdout, os.Stderr, cfg, offline.WithTokens(*tokens), offline.WithMaxTokens(*maxTokens))
}
