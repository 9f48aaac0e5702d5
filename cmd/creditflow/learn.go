package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/harness/learn"
	"github.com/creditflow/creditflow/internal/kafkasec"
)

func init() {
	register("learn", "close the training loop: a policy learns through creditflow on the CPU (workers, processor, trainer)", runLearn)
}

func runLearn(args []string) (err error) {
	o := learn.Defaults()
	fs := newFlagSet("learn", `usage: creditflow learn [--method lapo|grpo|attnsr|ppo|oracle] [--seed S] [--json] [flags]
       creditflow learn --compare lapo,grpo --seeds 3 [--out docs/img/learn] [flags]
       creditflow learn --compare lapo,grpo --noise-sweep 0,0.1,0.2,0.3,0.4 --seeds 4 [--from FILES] [flags]
       creditflow learn --report docs/img/learn.json,...

Closes the training loop on this machine (docs/learn.md): --workers Python rollout workers play
an interactive world with the current policy and publish trajectories; the processor
(creditflow run, its own process) scores them with the weights the trainer last announced and
publishes per-token advantages (or token rewards); a Python trainer takes clipped
policy-gradient steps on them (with a critic for token rewards),
writes a checkpoint, announces the version, and evaluates it on held-out episodes. Workers and
the scorer load each new version. Everything runs on the embedded broker unless --brokers is
given. The summary reports held-out success by version and what the loop proved on the way;
--json ends with one JSON object. Runs the Python ends with the project's Python environment
(creditflow pyenv; built on first use, a few minutes once), or $CREDITFLOW_PYTHON when set.`)
	var brokers, compare, out, logLevel, dir, from, report, sweep *string
	var seeds *int
	var startup *time.Duration
	var asJSON *bool
	fs.inGroup(groupGeneral, func() {
		fs.StringVar((*string)(&o.Method), "method", string(o.Method), "credit assignment: lapo, grpo (outcome advantages only: LAPO with λ = 0), attnsr, ppo (the terminal reward only, with the critic of --attnsr-output ppo), or oracle (GRPO plus ±λ on the turns the world labelled key or harmful: the control arm)")
		fs.StringVar(&o.World, "world", "", "searchqa, widesearch, rumour, household or household-long (default: household for attnsr and ppo, searchqa otherwise; docs/learn.md)")
		fs.IntVar(&o.Seed, "seed", o.Seed, "seed of the workers' episodes and the trainer")
		fs.IntVar(&o.Steps, "steps", o.Steps, "trainer steps (each announces a new policy version)")
		fs.IntVar(&o.Workers, "workers", o.Workers, "Python rollout workers")
		fs.IntVar(&o.GroupsPerStep, "groups-per-step", o.GroupsPerStep, "groups (prompts) per trainer step")
		fs.IntVar(&o.GroupSize, "group-size", o.GroupSize, "episodes per prompt (G)")
		fs.IntVar(&o.GroupsPerVersion, "groups-per-version", 0, "groups a worker plays under one version before it waits for the next (0: its share of --groups-per-step, so the workers produce what the trainer consumes)")
		fs.Float64Var(&o.LR, "lr", o.LR, "the trainer's learning rate (Adam)")
		fs.IntVar(&o.Epochs, "epochs", o.Epochs, "the trainer's optimizer steps per batch (PPO epochs)")
		fs.IntVar(&o.Epochs, "ppo-epochs", o.Epochs, "the same as --epochs")
		fs.Float64Var(&o.Clip, "clip", o.Clip, "ε of the clipped ratio to the policy before the update")
		fs.Float64Var(&o.ISCap, "is-cap", o.ISCap, "C of the truncated importance weight against the rollout log-probs")
		fs.Float64Var(&o.Lambda, "lambda", o.Lambda, "lapo: λ, weight of the process advantage; oracle (and ppo --oracle-steps): the ±λ on the labelled turns")
		fs.StringVar((*string)(&o.Direction), "direction", string(o.Direction), "lapo: backward (LAPO) or forward (IGPO's direction, the ablation)")
		fs.BoolVar(&o.NoGate, "no-gate", false, "lapo: switch the sign gate off (the ablation)")
		fs.StringVar(&o.AttnSROutput, "attnsr-output", o.AttnSROutput, "attnsr: grpo (the GRPO-reweighting variant, α = 0.25) or ppo (step rewards into GAE with a critic)")
		fs.Float64Var(&o.Beta, "beta", o.Beta, "attnsr: β, the step reward budget")
		fs.Float64Var(&o.Gamma, "gamma", o.Gamma, "with a critic (attnsr --attnsr-output ppo, ppo): GAE's γ")
		fs.Float64Var(&o.GAELambda, "gae-lambda", o.GAELambda, "with a critic: GAE's λ")
		fs.Float64Var(&o.CriticLR, "critic-lr", o.CriticLR, "with a critic: its learning rate (Adam)")
		fs.IntVar(&o.EvalEpisodes, "eval-episodes", o.EvalEpisodes, "held-out episodes evaluated per version")
		fs.Float64Var(&o.JudgeNoise, "judge-noise", 0, "publish a flaky judge's outcome reward, wrong with this probability (held-out success counts true answers; docs/learn.md)")
		fs.StringVar(&o.Reward, "reward", o.Reward, "the outcome reward the workers publish: judge (the judge's verdict), likelihood (the gold answer's likelihood given the pre-answer context), gold-bonus (the verdict plus --gold-bonus when the gold appears in an observation) or likelihood-bonus (the verdict plus --gold-bonus times the likelihood): the noisy-judge controls")
		fs.Float64Var(&o.GoldBonus, "gold-bonus", o.GoldBonus, "with --reward gold-bonus or likelihood-bonus: the bonus (its scale)")
		fs.BoolVar(&o.LabelNoise, "label-noise", false, "lapo: give the scorer the gold the judge believes, wrong exactly where the judge errs (a noisy-judge control)")
		fs.BoolVar(&o.OracleSteps, "oracle-steps", false, "ppo: add the oracle's step rewards, ±--lambda on the last action token of each turn the world labelled (the arm ppo+oracle: the control of AttnSR's PPO setup)")
		fs.BoolVar(&o.OracleOnce, "oracle-once", false, "oracle arms: pay each label once (the first key turn, the enabling turn before it, every harmful turn)")
		fs.BoolVar(&o.AttnSRTerminal, "attnsr-terminal", false, "attnsr, ppo output: the trainer moves each sample's step rewards onto its terminal token (the control of where the step rewards are placed)")
		fs.BoolVar(&o.AttnSRUniform, "attnsr-uniform", false, "attnsr: spread the step budget evenly over the moves (ρ = η = 0; the control of the attention's allocation)")
		fs.BoolVar(&o.Chaos, "chaos", false, "SIGKILL the processor (a third of the way) and worker 0 (half way); both are restarted")
		fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up a run after this long")
		dir = fs.String("dir", "", "keep checkpoints and process logs in this folder (default: a temporary folder, removed)")
		asJSON = fs.Bool("json", false, "end with one JSON object on the last line of stdout")
		compare = fs.String("compare", "", "run each of these arms (comma-separated: a method, or METHOD+VARIANT with variants forward, no-gate, label-noise, likelihood, gold-bonus, likelihood-bonus, oracle, once, uniform) on each seed and write a picture and a table")
		seeds = fs.Int("seeds", 3, "with --compare: seeds 1..N")
		sweep = fs.String("noise-sweep", "", "with --compare: run every arm at each of these judge noises (comma-separated, e.g. 0,0.1,0.2,0.3,0.4) instead of --judge-noise; arms are compared at one level")
		out = fs.String("out", "docs/img/learn", "with --compare: write <out>.svg, <out>.md and <out>.json")
		from = fs.String("from", "", "with --compare: take the runs of these files (a comparison's .json, or what learn --json printed; comma-separated) that were made with the same method, seed and settings, instead of running them again")
		report = fs.String("report", "", "run nothing: write <name>.md and <name>.svg again from each comparison <name>.json given (comma-separated)")
	})
	fs.inGroup(groupKafka, func() {
		brokers = fs.String("brokers", "", "use these brokers instead of the embedded one (standard creditflow.* topics on a cluster that has none of them, else creditflow-learn-<time>.*)")
		startup = fs.Duration("startup-timeout", 30*time.Second, "with --brokers: wait at most this long for a broker to answer")
		fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions per topic")
		fs.Int64Var(&o.MaxPolicyLag, "max-policy-lag", o.MaxPolicyLag, "samples more than N versions behind the newest go to the stale topic")
	})
	mon := &optionalAddr{def: defaultMonitorAddr}
	fs.inGroup(groupObservability, func() {
		logLevel = fs.String("log-level", "warn", "zerolog level of learn's own logs on stderr")
		fs.Var(mon, "monitor", "also serve the live monitor page (default "+defaultMonitorAddr+"; --monitor ADDR for another), and keep serving after the summary until Ctrl-C")
	})
	if err := fs.parseWith(args, func(a []string) error { return mon.parse(fs.FlagSet, a) }); err != nil {
		return err
	}
	if *report != "" {
		return learn.WriteReports(splitList(*report), os.Stderr)
	}
	if o.Logger, err = newLogger(*logLevel); err != nil {
		return err
	}
	if err := o.Validate(); err != nil { // before looking for Python or starting anything
		return asUsage(err)
	}
	for _, m := range splitList(*compare) {
		if _, err := learn.WithArm(o, m); err != nil {
			return usagef("--compare: %w", err)
		}
	}
	var noises []float64
	for _, q := range splitList(*sweep) {
		x, err := strconv.ParseFloat(q, 64)
		oo := o
		oo.JudgeNoise = x
		if err == nil {
			err = oo.Validate()
		}
		if err != nil {
			return usagef("--noise-sweep %s: %w", q, err)
		}
		noises = append(noises, x)
	}
	if *sweep != "" && *compare == "" {
		return usagef("--noise-sweep needs --compare")
	}
	if *compare != "" && *seeds < 1 {
		return usagef("--seeds %d: want at least 1", *seeds)
	}
	if o.Exe, err = os.Executable(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer func() { err = stoppedBy(ctx, err) }() // Ctrl-C at any point: exit status 130
	if o.Python, err = learn.FindPython(ctx, os.Stderr); err != nil {
		return err
	}
	o.Brokers = splitList(*brokers)
	if len(o.Brokers) > 0 {
		if err := (kafkasec.Config{}).WaitReachable(ctx, o.Brokers, *startup); err != nil {
			return err
		}
		live, err := liveTopics(ctx, o.Brokers)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			o.Topics = demo.Topics(fmt.Sprintf("creditflow-learn-%d", time.Now().Unix()))
			o.GroupID = o.Topics.Trajectories[:strings.LastIndex(o.Topics.Trajectories, ".")]
			fmt.Fprintf(os.Stderr, "the brokers already have %s: learn uses its own topics %s.*\n", strings.Join(live, ", "), o.GroupID)
		}
	}
	if *compare != "" {
		var earlier []learn.Summary
		for _, f := range splitList(*from) {
			rs, err := learn.LoadRuns(f)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			earlier = append(earlier, rs...)
		}
		c := learn.CompareRuns{Methods: splitList(*compare), Noises: noises, Seeds: *seeds, Earlier: earlier, Out: *out, Dir: *dir, JSON: *asJSON}
		return c.Run(ctx, o, os.Stdout, os.Stderr)
	}
	var monitorURL string
	if mon.set {
		var stopMonitor func()
		if o.Brokers, monitorURL, stopMonitor, err = monitorForRun(ctx, o.Brokers, o.Partitions, o.Topics, mon.addr, o.Logger); err != nil {
			return err
		}
		defer stopMonitor()
	}
	o.Dir = *dir
	sum, runErr := learn.RunWithProgress(ctx, o, os.Stderr)
	sum.WriteText(os.Stdout)
	return endRun(ctx, sum, *asJSON, mon.set, monitorURL, runErr)
}
