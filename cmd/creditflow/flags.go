package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/state"
)

// creditFlags defines a flag for every default of both methods
// (docs/method.md; not --method, which each command defines itself) in the
// LAPO, AttnSR and credit assignment groups, and returns the function that
// applies the flags that need it after parsing (its error is a usageError).
func creditFlags(fs *flagSet, cfg *credit.Config) func() error {
	fs.inGroup(groupCredit, func() {
		fs.Float64Var(&cfg.EpsR, "eps-r", cfg.EpsR, "ε_R of the outcome advantage (both methods)")
	})
	var noGate *bool
	var kinds *string
	fs.inGroup(groupLAPO, func() {
		noGate = fs.Bool("no-gate", !cfg.Gate, "switch sign-consistency gating off (A_proc = z̃)")
		fs.Float64Var(&cfg.Lambda, "lambda", cfg.Lambda, "λ, weight of the process advantage")
		fs.Float64Var(&cfg.EpsIG, "eps-ig", cfg.EpsIG, "ε_ig of the robust scale τ")
		fs.Float64Var(&cfg.EpsZ, "eps-z", cfg.EpsZ, "ε_z of the group normalization")
		kinds = fs.String("eligible-kinds", strings.Join(cfg.EligibleKinds, ","), "comma-separated turn kinds that can be eligible")
		fs.BoolVar(&cfg.NoAnswerEmptySegmentsEligible, "no-answer-empty-segments-eligible", cfg.NoAnswerEmptySegmentsEligible,
			"in a trajectory without an answer turn, a turn of an eligible kind is eligible even with an empty assistant or observation segment (default: both must be non-empty)")
		fs.BoolVar(&cfg.NoAnswerEmptySegmentsEligible, "no-answer-all-kinds-eligible", cfg.NoAnswerEmptySegmentsEligible,
			"deprecated alias of --no-answer-empty-segments-eligible")
	})
	fs.inGroup(groupAttnSR, func() {
		fs.StringVar((*string)(&cfg.Output), "attnsr-output", string(cfg.Output), "grpo (reweighted advantages) or ppo (token rewards)")
		fs.Float64Var(&cfg.Beta, "beta", cfg.Beta, "β, step reward budget scale")
		fs.Float64Var(&cfg.Alpha, "alpha", cfg.Alpha, "α, grpo reweighting strength")
		fs.Float64Var(&cfg.Rho, "rho", cfg.Rho, "ρ, backtracking decay")
		fs.Float64Var(&cfg.Eta, "eta", cfg.Eta, "η, weight of the recency term")
		fs.Float64Var(&cfg.T, "temperature", cfg.T, "T, allocation softmax temperature")
		fs.Float64Var(&cfg.Eps, "eps", cfg.Eps, "ε, floor inside the logs")
		fs.Float64Var(&cfg.MStar, "m-star", cfg.MStar, "m*, focus mass that counts as full focus")
		fs.Float64Var(&cfg.Delta, "ema-delta", cfg.Delta, "δ, EMA baseline decay (one batch = one group)")
	})
	return func() error {
		cfg.Gate = !*noGate
		cfg.EligibleKinds = nil
		for _, k := range strings.Split(*kinds, ",") {
			if k = strings.TrimSpace(k); k != "" {
				cfg.EligibleKinds = append(cfg.EligibleKinds, k)
			}
		}
		return asUsage(cfg.Validate())
	}
}

// windowFlags defines the group window flags (docs/stream.md, "Advantage stage")
// and returns the function that applies them after parsing.
func windowFlags(fs *flagSet, w *state.WindowConfig) func() {
	var timeout *time.Duration
	fs.inGroup(groupWindows, func() {
		timeout = fs.Duration("window-timeout", time.Duration(w.TimeoutMs)*time.Millisecond, "group window after the first member (event time)")
		fs.IntVar(&w.MinGroupSize, "min-group-size", w.MinGroupSize, "members needed to finalize a timed-out group as partial")
	})
	return func() { w.TimeoutMs = timeout.Milliseconds() }
}

// optionalAddr is a flag whose value is optional: "--name" alone takes def,
// "--name=ADDR" or "--name ADDR" takes ADDR.
type optionalAddr struct {
	def, addr string
	set       bool
}

func (o *optionalAddr) String() string   { return o.addr }
func (o *optionalAddr) IsBoolFlag() bool { return true } // "--name" alone is allowed
func (o *optionalAddr) Set(v string) error {
	o.set = true
	switch v {
	case "true", "":
		o.addr = o.def
	case "false":
		o.set, o.addr = false, ""
	default:
		o.addr = v
	}
	return nil
}

// parse parses args with fs, taking a positional argument that directly
// follows the flag as its value ("--name ADDR"); the command takes no other
// positional arguments.
func (o *optionalAddr) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	for fs.NArg() > 0 {
		if !o.set || o.addr != o.def || !strings.Contains(fs.Arg(0), ":") {
			return fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
		}
		o.addr = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
	}
	return nil
}
