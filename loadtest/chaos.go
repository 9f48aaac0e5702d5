package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/vocab"
)

// ChaosOptions configure a chaos run.
type ChaosOptions struct {
	Workload
	Kills         int  // stops of the processor (each followed by a restart)
	Graceful      bool // stop with SIGTERM (drain, snapshot, commit) instead of SIGKILL
	ScorerProcess bool // scorers run as child processes
	Scorers       int  // scorer processes with ScorerProcess
	KillScorers   bool // SIGKILL and restart scorer processes too
	BrokerOutages int  // broker cuts of OutageLength each
	OutageLength  time.Duration
	// StatePartitions of the state topic (default 1, what an older
	// `creditflow run --create-topics` made; it now makes as many as the
	// scored topic, and operators' topics often get the cluster's default,
	// say 4).
	StatePartitions int
}

// DefaultChaos is the default chaos run.
func DefaultChaos() ChaosOptions {
	return ChaosOptions{Workload: Workload{Groups: 40, Partitions: 4, Method: credit.MethodLAPO, Seed: 7,
		ProduceEvery: 750 * time.Millisecond, Timeout: 10 * time.Minute}, Kills: 5, Scorers: 2, OutageLength: 3 * time.Second, StatePartitions: 1}
}

// ChaosResult is what a chaos run measured. JSON names are stable.
type ChaosResult struct {
	Method vocab.Method `json:"method"`
	Kills  int          `json:"kills"`
	// UnsettledKills are stops made while the processor's consumer groups
	// were not Stable with one member (after waiting a minute for it).
	UnsettledKills int `json:"unsettled_kills"`
	// UncleanStops are SIGTERM stops (--graceful) after which the processor
	// did not exit with status 0 within 40 s.
	UncleanStops  int    `json:"unclean_stops"`
	Signal        string `json:"signal"`
	ScorerKills   int    `json:"scorer_kills"`
	BrokerOutages int    `json:"broker_outages"`
	Groups        int    `json:"groups"`
	// StatePartitions is the state topic's partition count.
	StatePartitions int `json:"state_partitions"`
	Comparison
	DeadLetters     int            `json:"dead_letters"`
	DeadByReason    map[string]int `json:"dead_letters_by_reason,omitempty"`
	ProcessorStarts int            `json:"processor_starts"`
	UnexpectedExits int            `json:"unexpected_exits"`
	CleanShutdown   bool           `json:"clean_shutdown"`
	// StateResets are partitions that started past their beginning without
	// a state snapshot (the EMA baseline started over; logged as errors).
	StateResets      int            `json:"state_resets"`
	Seconds          float64        `json:"seconds"`
	ReferenceSeconds float64        `json:"reference_seconds"`
	LogWarnings      map[string]int `json:"log_warnings,omitempty"`
	Logs             string         `json:"logs"`
}

func (o *ChaosOptions) check() error {
	if o.KillScorers {
		o.ScorerProcess = true // scorers to kill must be processes of their own
	}
	switch {
	case o.Groups <= 0:
		return fmt.Errorf("--groups must be positive")
	case o.Kills < 0 || o.BrokerOutages < 0:
		return fmt.Errorf("--kills and --broker-outages cannot be negative")
	case o.Partitions <= 0:
		return fmt.Errorf("--partitions must be positive")
	case o.StatePartitions <= 0:
		return fmt.Errorf("--state-partitions must be positive")
	case o.Method != credit.MethodLAPO && o.Method != credit.MethodAttnSR:
		return fmt.Errorf("--method %q: use lapo or attnsr", o.Method)
	case o.ScorerProcess && o.Scorers <= 0:
		return fmt.Errorf("--scorers must be positive with --scorer-process")
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// scratch makes the scratch directory when none is set.
func scratch(dir, pattern string) (string, error) {
	if dir != "" {
		return dir, os.MkdirAll(dir, 0o755)
	}
	return os.MkdirTemp("", pattern)
}

// RunChaos runs the reference and then the chaos phase and compares them:
// setup (the broker and the reference samples), the processes, the faults
// while the samples come in, a graceful end, and the summary.
func RunChaos(ctx context.Context, o ChaosOptions) (ChaosResult, error) {
	c, res, err := newChaosRun(o)
	if err != nil {
		return res, err
	}
	c.o.Logf("chaos: building creditflow and starting the embedded broker (logs in %s)", c.dir)
	if c.e, err = newEnv(ctx, c.o.Bin, c.dir, c.o.Partitions, nopLog()); err != nil {
		return res, err
	}
	defer c.e.Close()
	ref, err := c.reference(ctx, &res)
	if err != nil {
		return res, err
	}
	defer c.stopScorers()
	if err := c.startProcesses(ctx); err != nil {
		return res, err
	}
	defer c.p.stop(syscall.SIGKILL, 5*time.Second)

	c.col = newCollector(c.e, c.t, c.w)
	cctx, cancelCol := context.WithCancel(ctx)
	defer cancelCol()
	go c.col.run(cctx)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	c.ctx = runCtx
	go c.p.supervise(runCtx)
	for _, sp := range c.scorers {
		go sp.supervise(runCtx)
	}
	plan, outageAt, err := c.plan()
	if err != nil {
		return res, fmt.Errorf("chaos: %w", err)
	}
	var wg sync.WaitGroup
	prodErr := c.faults(&wg, plan, outageAt)

	complete := c.col.await(ctx, runCtx, "chaos", c.w.expected(), c.start, c.o.Timeout, c.o.Logf)
	res.Seconds = cmdutil.Round3(time.Since(c.start).Seconds())
	stopRun()
	wg.Wait()
	c.e.b.Restore()
	if err := <-prodErr; err != nil && complete {
		return res, err
	}
	if res.CleanShutdown, err = c.finish(ctx); err != nil {
		return res, err
	}
	c.col.poll(ctx)
	cancelCol()
	c.summarise(&res, ref)
	if !complete {
		return res, fmt.Errorf("chaos: %d of %d samples after %v", res.Seen, res.Expected, c.o.Timeout)
	}
	return res, nil
}

// scorerCommand is how a scorer process is started at addr: `creditflow
// scorer` when the binary has that command with an address flag, else this
// harness's own scorer-serve command (the same CPU reference scorer).
func scorerCommand(bin, addr string) (string, []string, error) {
	out, _ := exec.Command(bin, "scorer", "-h").CombinedOutput()
	help := string(out)
	if !strings.Contains(help, "unknown command") {
		for _, f := range []string{"listen", "addr"} {
			if regexp.MustCompile(`(?m)^\s+-` + f + `(\s|$)`).MatchString(help) {
				return bin, []string{"scorer", "--" + f, addr}, nil
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("scorer process: %w", err)
	}
	return self, []string{scorerServeCmd, "--addr", addr}, nil
}

// stateResets counts the processor's "no state snapshot was found" errors.
func stateResets(warnings map[string]int) int {
	n := 0
	for msg, c := range warnings {
		if strings.Contains(msg, "no state snapshot was found") {
			n += c
		}
	}
	return n
}

func chaosCmd(args []string) (int, error) {
	o := DefaultChaos()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	o.Workload.addFlags(fs)
	fs.IntVar(&o.Kills, "kills", o.Kills, "SIGKILLs of the processor at random moments (each followed by a restart)")
	fs.BoolVar(&o.Graceful, "graceful", o.Graceful, "stop the processor with SIGTERM instead of SIGKILL (a graceful drain each time)")
	fs.BoolVar(&o.ScorerProcess, "scorer-process", o.ScorerProcess, "run the scorers as separate child processes")
	fs.IntVar(&o.Scorers, "scorers", o.Scorers, "scorer processes with --scorer-process")
	fs.BoolVar(&o.KillScorers, "kill-scorers", o.KillScorers, "also SIGKILL and restart scorer processes at random moments (implies --scorer-process)")
	fs.IntVar(&o.BrokerOutages, "broker-outages", o.BrokerOutages, "cut the broker off this many times during the run")
	fs.DurationVar(&o.OutageLength, "outage-length", o.OutageLength, "length of each broker outage")
	fs.IntVar(&o.StatePartitions, "state-partitions", o.StatePartitions, "partitions of the state topic (snapshots are found in the partition their key hashes to)")
	return runCommand(fs, args, &o.Workload, "chaos",
		func(ctx context.Context) (ChaosResult, error) { return RunChaos(ctx, o) },
		printChaos, func(r ChaosResult) Comparison { return r.Comparison })
}

func printChaos(r ChaosResult) {
	w := os.Stdout
	fmt.Fprintf(w, "method            %s, %d groups, %d state partitions\n", r.Method, r.Groups, r.StatePartitions)
	fmt.Fprintf(w, "faults            %d processor stops by %s (%d while its groups were unsettled, %d unclean), %d scorer kills, %d broker outages (%d processor starts)\n",
		r.Kills, r.Signal, r.UnsettledKills, r.UncleanStops, r.ScorerKills, r.BrokerOutages, r.ProcessorStarts)
	printOutcome(r.Comparison, r.DeadLetters, r.DeadByReason, r.UnexpectedExits, "child processes")
	fmt.Fprintf(w, "state resets      %d (partitions that found no snapshot and started the EMA over)\n", r.StateResets)
	fmt.Fprintf(w, "time              chaos %.1fs, reference %.1fs; clean SIGTERM shutdown at the end: %v\n", r.Seconds, r.ReferenceSeconds, r.CleanShutdown)
	printTail(r.Comparison, r.LogWarnings, r.Logs)
}
