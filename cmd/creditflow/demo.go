package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/health"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/vocab"
)

func init() {
	register("demo", "the whole pipeline on an embedded broker with the CPU scorer and synthetic rollouts", runDemo)
}

func runDemo(args []string) (err error) {
	o := demo.Defaults()
	fs := newFlagSet("demo", `usage: creditflow demo [--groups N] [--method lapo|attnsr] [--json] [flags]

Runs the whole pipeline in one process: an embedded Kafka broker (or --brokers), CPU reference
scorer servers with the built-in tiny model, both stages, a synthetic rollout producer and a
trainer-side consumer that validates every sample. It injects --bad malformed records on purpose
(they must end as dead letters) and ends with a summary.`)
	var brokers, metricsAddr, logLevel *string
	var startup *time.Duration
	var asJSON *bool
	fs.inGroup(groupGeneral, func() {
		fs.IntVar(&o.Groups, "groups", o.Groups, "prompts (groups) to run")
		fs.IntVar(&o.GroupSize, "group-size", o.GroupSize, "trajectories per prompt (G)")
		fs.IntVar(&o.Bad, "bad", o.Bad, "malformed records to inject on purpose (they must end as dead letters)")
		fs.IntVar(&o.MaxAhead, "max-ahead", o.MaxAhead, "groups the rollout producer may run ahead of the trainer")
		fs.Uint64Var(&o.Seed, "seed", o.Seed, "workload seed")
		fs.Int64Var(&o.StartMs, "start-ms", 0, "event time (Unix ms) of the first trajectory, the next ones 10 ms apart: the same --start-ms and --seed reproduce the output bytes (0: each trajectory carries the wall clock when it is published, so sample ages are real)")
		fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
		asJSON = fs.Bool("json", false, "end with one JSON object on the last line of stdout")
	})
	fs.inGroup(groupKafka, func() {
		brokers = fs.String("brokers", "", "use these brokers instead of starting the embedded one (topics are created if missing)")
		startup = fs.Duration("startup-timeout", 30*time.Second, "with --brokers: wait at most this long for a broker to answer, then exit non-zero")
		fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions per topic")
		fs.StringVar(&o.Prefix, "topic-prefix", "", "name the demo's topics <prefix>.trajectories, … and its consumer groups <prefix>… (default with --brokers: the standard creditflow.* names on a cluster that has none of them yet, so creditflow monitor and run find them; otherwise creditflow-demo-<unix time>, never a live run's topics)")
	})
	fs.inGroup(groupScorer, func() {
		fs.IntVar(&o.Scorers, "scorers", o.Scorers, "scorer servers behind the client (load balancing)")
	})
	fs.inGroup(groupCredit, func() {
		fs.StringVar((*string)(&o.Method), "method", string(o.Method), "credit assignment: lapo (search-QA workload) or attnsr (ALFWorld-shaped workload)")
	})
	fs.inGroup(groupLAPO, func() {
		fs.StringVar((*string)(&o.Direction), "direction", string(o.Direction), "backward or forward (ablation)")
		fs.StringVar((*string)(&o.LAPOStatistic), "lapo-statistic", string(o.LAPOStatistic), lapoStatisticHelp)
	})
	credit := creditFlags(fs, &o.Credit)
	mon := &optionalAddr{def: defaultMonitorAddr}
	fs.inGroup(groupObservability, func() {
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics here while the demo runs (e.g. 127.0.0.1:9464)")
		logLevel = fs.String("log-level", "error", "zerolog level for the pipeline's JSON logs on stderr (warn also logs each dead letter)")
		fs.Var(mon, "monitor", "also serve the live monitor page (default "+defaultMonitorAddr+"; --monitor ADDR for another), and keep serving after the summary until Ctrl-C")
	})
	if err := fs.parseWith(args, func(a []string) error { return mon.parse(fs.FlagSet, a) }); err != nil {
		return err
	}
	if err := credit(); err != nil {
		return err
	}
	if o.Logger, err = newLogger(*logLevel); err != nil {
		return err
	}
	o.Credit.Method = o.Method
	if err := o.Validate(); err != nil { // refused before anything starts (exit status 2)
		return asUsage(err)
	}
	o.Brokers = splitList(*brokers)
	tty := isTerminal(os.Stderr)
	last := time.Time{}
	o.Progress = func(p demo.Progress) {
		if p.Measuring {
			if tty {
				fmt.Fprintln(os.Stderr)
			}
			fmt.Fprintln(os.Stderr, "every sample arrived; measuring where credit lands (forward direction, random-weight model; Ctrl-C stops)")
			return
		}
		line := fmt.Sprintf("groups in %d/%d  out %d  samples %d/%d  dead letters %d  %.1fs",
			p.GroupsIn, o.Groups, p.GroupsOut, p.SamplesOut, p.Expected, p.DeadLetters, p.Elapsed.Seconds())
		if tty {
			fmt.Fprintf(os.Stderr, "\r%-90s", line)
		} else if time.Since(last) > 2*time.Second {
			fmt.Fprintln(os.Stderr, line)
			last = time.Now()
		}
	}
	if *metricsAddr != "" {
		reg := prometheus.NewRegistry()
		o.Registerer = reg
		stopMetrics, err := health.Serve(*metricsAddr, reg, o.Logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
		fmt.Fprintf(os.Stderr, "metrics on http://%s/metrics\n", *metricsAddr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer func() { err = stoppedBy(ctx, err) }() // Ctrl-C at any point: exit status 130
	if len(o.Brokers) > 0 {
		if err := (kafkasec.Config{}).WaitReachable(ctx, o.Brokers, *startup); err != nil {
			return err
		}
		if o.Prefix == "" {
			live, err := liveTopics(ctx, o.Brokers)
			if err != nil {
				return err
			}
			if len(live) > 0 { // a cluster in use: stay off its topics and groups
				o.Prefix = fmt.Sprintf("creditflow-demo-%d", time.Now().Unix())
				fmt.Fprintf(os.Stderr, "the brokers already have %s: the demo uses its own topics and groups %s.*\n", strings.Join(live, ", "), o.Prefix)
			}
		}
	}
	where := "embedded broker"
	if len(o.Brokers) > 0 {
		where = "brokers " + strings.Join(o.Brokers, ",")
	}
	if o.Prefix != "" {
		where += ", topics and groups " + o.Prefix + ".*"
	}
	fmt.Fprintf(os.Stderr, "creditflow demo: %s, %d groups of %d, %s, %d CPU scorer(s) with the built-in tiny model\n",
		o.Method, o.Groups, o.GroupSize, where, o.Scorers)
	var monitorURL string
	if mon.set {
		var stopMonitor func()
		if o.Brokers, monitorURL, stopMonitor, err = monitorForRun(ctx, o.Brokers, o.Partitions, demo.Topics(o.Prefix), mon.addr, o.Logger); err != nil {
			return err
		}
		defer stopMonitor()
	}
	if o.Bad > 0 {
		fmt.Fprintf(os.Stderr, "injecting %d malformed records on purpose (--bad): each must end as a dead letter\n", o.Bad)
	}
	sum, runErr := demo.Run(ctx, o)
	if tty {
		fmt.Fprintln(os.Stderr)
	}
	printSummary(sum)
	return endRun(ctx, sum, *asJSON, mon.set, monitorURL, runErr)
}

func printSummary(s demo.Summary) {
	w := os.Stdout
	if s.WallClock {
		fmt.Fprintf(w, "method            %s (event times: the wall clock at publish; --start-ms %d gives reproducible ones)\n", s.Method, s.StartMs)
	} else {
		fmt.Fprintf(w, "method            %s (--start-ms %d reproduces these samples)\n", s.Method, s.StartMs)
	}
	fmt.Fprintf(w, "groups            %d in, %d out\n", s.GroupsIn, s.GroupsOut)
	fmt.Fprintf(w, "trajectories      %d\n", s.Trajectories)
	fmt.Fprintf(w, "samples           %d (lost %d, invalid %d, duplicates %d)\n", s.SamplesOut, s.Lost, s.Invalid, s.Duplicates)
	if s.Interrupted && s.Pending+s.NotProduced == 0 {
		fmt.Fprintf(w, "interrupted       while measuring where credit lands: every sample had arrived\n")
	} else if s.Interrupted {
		fmt.Fprintf(w, "interrupted       before the end: %d trajectories produced and not yet trained on, %d never produced (none lost)\n", s.Pending, s.NotProduced)
	}
	fmt.Fprintf(w, "rewards           mean %.4f, success rate %.1f%% (reward ≥ 1)\n", s.RewardMean, 100*s.SuccessRate)
	dead := fmt.Sprintf("%d", s.DeadLetters)
	if len(s.DeadByReason) > 0 {
		dead += " (" + demo.FormatCounts(s.DeadByReason) + ")"
	}
	switch {
	case s.InjectedBad > 0 && s.DeadLetters == s.InjectedBad:
		dead += fmt.Sprintf(": the %d malformed records injected on purpose", s.InjectedBad)
	case s.InjectedBad > 0:
		dead += fmt.Sprintf(": %d injected on purpose, %d others", s.InjectedBad, s.DeadLetters-s.InjectedBad)
	}
	fmt.Fprintf(w, "dead letters      %s\n", dead)
	if s.Method == vocab.AttnSR {
		fmt.Fprintf(w, "mean confidence   %.4f\n", s.MeanConfidence)
		fmt.Fprintf(w, "EMA baseline      %.4f (mean R̄_t over the samples)\n", s.EMABaseline)
		fmt.Fprintf(w, "step rewards      %.1f%% positive, %.1f%% negative\n", 100*s.PositiveStep, 100*s.NegativeStep)
		if s.AttnSRKeyHitRate != nil {
			fmt.Fprintf(w, "key step hit      %.1f%% of %d trajectories have their largest p_k on the key step (chance %.1f%%)\n",
				100**s.AttnSRKeyHitRate, s.AttnSRKeyMeasured, 100**s.AttnSRKeyChance)
		}
	} else {
		fmt.Fprintf(w, "eligible turns    %d: Δ %.1f%% positive, %.1f%% negative\n", s.EligibleTurns, 100*s.PositiveDelta, 100*s.NegativeDelta)
		fmt.Fprintf(w, "gate pass rate    %.1f%%\n", 100*s.GatePassRate)
		fmt.Fprintf(w, "mean |A_proc|     %.4f\n", s.MeanAbsProcAdv)
		if s.LAPOHitRate != nil {
			fmt.Fprintf(w, "credit hit rate   %.1f%% of %d trajectories have their largest Δ (%s) on the informative turn (chance %.1f%%)\n",
				100**s.LAPOHitRate, s.LAPOHitMeasured, s.LAPOStatistic, 100**s.LAPOHitChance)
			if s.LAPOHitForward != nil && s.LAPOHitRandom != nil { // left out when interrupted
				fmt.Fprintf(w, "                  same trajectories: forward direction %.1f%%, random-weight model %.1f%%\n",
					100**s.LAPOHitForward, 100**s.LAPOHitRandom)
			}
		}
	}
	fmt.Fprintf(w, "throughput        %.1f trajectories/s, %.0f sample tokens/s over %.1fs\n", s.TrajPerSecond, s.TokensPerSec, s.Seconds)
	fmt.Fprintf(w, "latency           p50 %.0f ms, p99 %.0f ms (last member produced → sample consumed)\n", s.LatencyP50Ms, s.LatencyP99Ms)
	fmt.Fprintf(w, "scorer requests   %d\n", s.ScorerRequests)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// liveTopics returns which of the standard creditflow topics exist on the
// brokers (asked without auto-creating any).
func liveTopics(ctx context.Context, brokers []string) ([]string, error) {
	t := stage.DefaultTopics()
	var live []string
	for _, name := range []string{t.Trajectories, t.Scored, t.Samples, t.DeadLetters, t.State} {
		ends, err := consumers.TopicEnds(ctx, brokers, kafkasec.Config{}, name)
		if err != nil {
			return nil, err
		}
		if ends != nil {
			live = append(live, name)
		}
	}
	return live, nil
}
