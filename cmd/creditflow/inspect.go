package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/monitor/inspect"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/tokenizer"
)

func init() {
	register("inspect", "print samples turn by turn with their tokens colored by advantage (reads without a consumer group)", runInspect)
}

func runInspect(args []string) error { return inspectCmd(os.Stdout, isTerminal(os.Stdout), args) }

// inspectCmd runs the command, printing to w; colors only when w is a
// terminal (term) and neither --no-color nor NO_COLOR says otherwise.
func inspectCmd(w io.Writer, term bool, args []string) error {
	topics := stage.DefaultTopics()
	fs := newFlagSet("inspect", "usage: creditflow inspect [--brokers host:port,...] [--topic T] (--trajectory ID [--compare T2] | --best N | --worst N) [--json] [--no-color] [--tokenizer PATH]\n\n"+
		"Reads a samples topic without a consumer group (nothing is committed) and prints samples as the\n"+
		"monitor's sample view does: the text turn by turn, every policy token's background colored by its\n"+
		"advantage (or token reward) on a red–white–blue scale, prompt and observation text dimmed as\n"+
		"off-policy, each turn's diagnostics (LAPO Δ, S with and without, z, gate, A_proc; AttnSR p_k, s_k,\n"+
		"w̃), the reward and the group. --best/--worst read the whole topic and keep N; --compare prints the\n"+
		"same trajectory from a second topic with the differences marked. See docs/monitor.md.")
	var topic, scored, traj, by, tok, compare, colorBy *string
	var best, worst *int
	var asJSON, noColor *bool
	fs.inGroup(groupGeneral, func() {
		traj = fs.String("trajectory", "", "the trajectory_id of the sample to print")
		best = fs.Int("best", 0, "print the N samples with the highest reward (or process credit, --by)")
		worst = fs.Int("worst", 0, "print the N samples with the lowest reward (or process credit, --by)")
		by = fs.String("by", monitor.ByReward, "what --best and --worst rank by: reward or process (LAPO Σ A_proc, AttnSR Σ s_k)")
		asJSON = fs.Bool("json", false, "print each sample as one JSON object per line (as GET /api/v1/samples/{trajectory_id})")
		noColor = fs.Bool("no-color", false, "no colors even on a terminal (also NO_COLOR)")
		colorBy = fs.String("color-by", inspect.ColorAdvantage, "what the policy tokens are colored by: "+strings.Join(inspect.ColorChoices, ", ")+
			" (per turn: LAPO Δ, z̃, A_proc; AttnSR p_k, s_k, w̃)")
		tok = fs.String("tokenizer", "", "a model's tokenizer.json (or its folder) to decode token ids with; default: the built-in byte vocabulary")
	})
	kf := addKafkaFlags(fs)
	fs.inGroup(groupTopics, func() {
		topic = fs.String("topic", topics.Samples, "samples topic to read")
		compare = fs.String("compare", "", "with --trajectory: a second samples topic (a replay) to print the same trajectory from, differences marked")
		scored = fs.String("topic-scored", topics.Scored, "scored topic, read for each turn's S with and without it (empty: leave out)")
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	n := 0
	for _, set := range []bool{*traj != "", *best > 0, *worst > 0} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return usageError{errors.New("give exactly one of --trajectory ID, --best N, --worst N; run 'creditflow inspect -h' for the flags")}
	case *best < 0 || *worst < 0:
		return usageError{errors.New("--best and --worst take a positive number")}
	case *compare != "" && *traj == "":
		return usageError{errors.New("--compare needs --trajectory")}
	case *by != monitor.ByReward && *by != monitor.ByProcess:
		return usageError{fmt.Errorf("--by %q: use reward or process", *by)}
	case !inspect.ValidColor(*colorBy):
		return usageError{fmt.Errorf("--color-by %q: use one of %s", *colorBy, strings.Join(inspect.ColorChoices, ", "))}
	}
	dec := tokenizer.Bytes()
	if *tok != "" {
		var err error
		if dec, err = tokenizer.Load(*tok); err != nil {
			return err
		}
	}
	sec, err := kf.security()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st := &monitor.Store{Brokers: splitList(*kf.brokers), Security: sec}
	q := inspect.Query{Topic: *topic, Trajectory: *traj, Compare: *compare, Best: *best, Worst: *worst, By: *by, Scored: *scored}
	views, err := inspect.Read(ctx, st, q, dec, os.Stderr)
	if err != nil {
		return err
	}
	color := term && !*noColor && os.Getenv("NO_COLOR") == ""
	return inspect.PrintBy(w, views, *compare != "", *asJSON, color, *colorBy)
}
