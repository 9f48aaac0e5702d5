package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

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
	noGate := fs.Bool("no-gate", false, "lapo: switch sign-consistency gating off (A_proc = z̃)")
	fs.Float64Var(&cfg.Lambda, "lambda", cfg.Lambda, "lapo: λ, weight of the process advantage")
	fs.Float64Var(&cfg.EpsIG, "eps-ig", cfg.EpsIG, "lapo: ε_ig of the robust scale τ")
	fs.Float64Var(&cfg.EpsZ, "eps-z", cfg.EpsZ, "lapo: ε_z of the group normalization")
	kinds := fs.String("eligible-kinds", strings.Join(cfg.EligibleKinds, ","), "lapo: comma-separated turn kinds that can be eligible")
	fs.BoolVar(&cfg.NoAnswerSkipsObservationRule, "no-answer-all-kinds-eligible", cfg.NoAnswerSkipsObservationRule,
		"lapo: in a trajectory without an answer turn, every turn of an eligible kind is eligible even with an empty segment")
	fs.Float64Var(&cfg.EpsR, "eps-r", cfg.EpsR, "ε_R of the outcome advantage")
	fs.StringVar(&cfg.Output, "attnsr-output", cfg.Output, "attnsr: grpo (reweighted advantages) or ppo (token rewards)")
	fs.Float64Var(&cfg.Beta, "beta", cfg.Beta, "attnsr: β, step reward budget scale")
	fs.Float64Var(&cfg.Alpha, "alpha", cfg.Alpha, "attnsr: α, grpo reweighting strength")
	fs.Float64Var(&cfg.Rho, "rho", cfg.Rho, "attnsr: ρ, backtracking decay")
	fs.Float64Var(&cfg.Eta, "eta", cfg.Eta, "attnsr: η, weight of the recency term")
	fs.Float64Var(&cfg.T, "temperature", cfg.T, "attnsr: T, allocation softmax temperature")
	fs.Float64Var(&cfg.Eps, "eps", cfg.Eps, "attnsr: ε, floor inside the logs")
	fs.Float64Var(&cfg.MStar, "m-star", cfg.MStar, "attnsr: m*, focus mass that counts as full focus")
	fs.Float64Var(&cfg.Delta, "ema-delta", cfg.Delta, "attnsr: δ, EMA baseline decay (one batch = one group)")
	tokens := fs.Bool("tokens", false, "also write per-token arrays: token_advantages, loss_mask, token_rewards (ppo)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: input is read from stdin", fs.Args())
	}
	if *direction != "backward" && *direction != "forward" {
		return fmt.Errorf("--direction %q: use backward or forward", *direction)
	}
	cfg.Gate = !*noGate
	cfg.EligibleKinds = nil
	for _, k := range strings.Split(*kinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			cfg.EligibleKinds = append(cfg.EligibleKinds, k)
		}
	}
	return offline.Compute(os.Stdin, os.Stdout, os.Stderr, cfg, offline.WithTokens(*tokens))
}
