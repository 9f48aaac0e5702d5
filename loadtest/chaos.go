package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
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
	// StatePartitions of the state topic (default 1, what `creditflow run
	// --create-topics` makes; operators' topics often get the cluster's
	// default, say 4).
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

// RunChaos runs the reference and then the chaos phase and compares them.
func RunChaos(ctx context.Context, o ChaosOptions) (ChaosResult, error) {
	if err := o.check(); err != nil {
		return ChaosResult{}, err
	}
	dir, err := scratch(o.Dir, "creditflow-chaos-")
	if err != nil {
		return ChaosResult{}, err
	}
	res := ChaosResult{Method: o.Method, Groups: o.Groups, StatePartitions: o.StatePartitions, Logs: dir, Signal: "SIGKILL"}
	sig := syscall.SIGKILL
	if o.Graceful {
		sig, res.Signal = syscall.SIGTERM, "SIGTERM"
	}
	o.Logf("chaos: building creditflow and starting the embedded broker (logs in %s)", dir)
	e, err := newEnv(ctx, o.Bin, dir, o.Partitions, nopLog())
	if err != nil {
		return res, err
	}
	defer e.Close()
	e.state = o.StatePartitions
	w := newWorkload(o.Method, o.Groups, o.Seed)

	o.Logf("chaos: reference run (uninterrupted): %d groups of %d, %s", o.Groups, groupSize, o.Method)
	ref, err := runReference(ctx, e, w, o.Method, o.Timeout)
	if err != nil {
		return res, err
	}
	res.ReferenceSeconds = cmdutil.Round3(ref.seconds)
	o.Logf("chaos: reference done in %.1fs", ref.seconds)

	rng := rand.New(rand.NewPCG(o.Seed, 0xc4a05))
	var rmu sync.Mutex
	rnd := func(f func(r *rand.Rand) time.Duration) time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return f(rng)
	}

	t := topicsFor("chaos")
	if err := e.createTopics(ctx, t); err != nil {
		return res, err
	}
	start := time.Now()
	var scorerURLs []string
	var scorers []*proc
	if o.ScorerProcess {
		for i := 0; i < o.Scorers; i++ {
			port, err := freePort()
			if err != nil {
				return res, err
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			bin, args, err := scorerCommand(e.bin, addr)
			if err != nil {
				return res, err
			}
			sp := newProc(fmt.Sprintf("scorer-%d", i), bin, dir, args...)
			if err := sp.start(); err != nil {
				return res, err
			}
			defer sp.stop(syscall.SIGTERM, 10*time.Second)
			scorers = append(scorers, sp)
			scorerURLs = append(scorerURLs, "http://"+addr)
		}
	}
	p := newProc("processor", e.bin, dir, processorArgs(e.brokers, "chaos", t, o.Method, scorerURLs)...)
	if err := p.start(); err != nil {
		return res, err
	}
	defer p.stop(syscall.SIGKILL, 5*time.Second)

	col := newCollector(e, t, w)
	cctx, cancelCol := context.WithCancel(ctx)
	defer cancelCol()
	go col.run(cctx)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go p.supervise(runCtx)
	for _, sp := range scorers {
		go sp.supervise(runCtx)
	}
	// Processor stops at random moments, spread over the run (faultPlan);
	// broker outages at random points of the run's progress.
	rmu.Lock()
	plan, err := newFaultPlan(rng, o.Kills, o.Groups)
	outageAt := progressTargets(rng, o.BrokerOutages, w.expected())
	rmu.Unlock()
	if err != nil {
		return res, fmt.Errorf("chaos: %w", err)
	}
	var mu sync.Mutex
	kills, scorerKills, outages, unsettled, unclean := 0, 0, 0, 0, 0
	killsOver := false // the kill loop ended: hold nothing back any more
	ready := func(g int) bool {
		mu.Lock()
		defer mu.Unlock()
		return killsOver || kills >= plan.segment(g)
	}
	var wg sync.WaitGroup
	prodErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		prodErr <- e.produce(runCtx, w, t.Trajectories, o.ProduceEvery, ready)
	}()

	seenAtLeast := func(n int) bool { s, _ := col.progress(); return s >= n }
	waitUntil := func(cond func() bool) bool {
		for !cond() {
			if !cmdutil.SleepCtx(runCtx, 100*time.Millisecond) {
				return false
			}
		}
		return true
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			mu.Lock()
			killsOver = true
			mu.Unlock()
		}()
		for i, target := range plan.targets {
			started := time.Now()
			up := rnd(func(r *rand.Rand) time.Duration { return jitter(r, time.Second, 5*time.Second) })
			if !waitUntil(func() bool { return seenAtLeast(target) && time.Since(started) >= up }) {
				return
			}
			if seenAtLeast(w.expected()) {
				return
			}
			if !cmdutil.WaitSettled(runCtx, e.brokers, 1, time.Minute, "chaos.score", "chaos.advantage") {
				if runCtx.Err() != nil {
					return
				}
				mu.Lock()
				unsettled++
				mu.Unlock()
				o.Logf("chaos: the consumer groups did not settle within a minute; stopping the processor anyway")
			}
			exited := p.stop(sig, 40*time.Second)
			mu.Lock()
			kills++
			if o.Graceful && (!exited || p.lastExit() != "exit 0") {
				unclean++
			}
			mu.Unlock()
			seen, _ := col.progress()
			o.Logf("chaos: %s %d/%d of the processor at %d/%d samples (%.1fs; exited by itself: %v, %s)", res.Signal, i+1, o.Kills, seen, w.expected(),
				time.Since(start).Seconds(), exited, p.lastExit())
			if !cmdutil.SleepCtx(runCtx, rnd(func(r *rand.Rand) time.Duration { return jitter(r, 0, time.Second) })) {
				return
			}
			if err := p.start(); err != nil {
				o.Logf("chaos: restart failed: %v", err)
				return
			}
		}
	}()
	if o.KillScorers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !seenAtLeast(w.expected()) {
				if !cmdutil.SleepCtx(runCtx, rnd(func(r *rand.Rand) time.Duration { return jitter(r, 3*time.Second, 8*time.Second) })) {
					return
				}
				rmu.Lock()
				sp := scorers[rng.IntN(len(scorers))]
				rmu.Unlock()
				sp.stop(syscall.SIGKILL, 5*time.Second)
				mu.Lock()
				scorerKills++
				mu.Unlock()
				o.Logf("chaos: SIGKILL of %s (%.1fs)", sp.name, time.Since(start).Seconds())
				cmdutil.SleepCtx(runCtx, rnd(func(r *rand.Rand) time.Duration { return jitter(r, time.Second, 3*time.Second) }))
				if err := sp.start(); err != nil {
					o.Logf("chaos: scorer restart failed: %v", err)
				}
			}
		}()
	}
	if o.BrokerOutages > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, target := range outageAt {
				if !waitUntil(func() bool { return seenAtLeast(target) }) || seenAtLeast(w.expected()) {
					return
				}
				e.b.Cut()
				o.Logf("chaos: broker cut for %v (%.1fs)", o.OutageLength, time.Since(start).Seconds())
				cmdutil.SleepCtx(runCtx, o.OutageLength)
				e.b.Restore()
				mu.Lock()
				outages++
				mu.Unlock()
			}
		}()
	}

	complete := col.await(ctx, runCtx, "chaos", w.expected(), start, o.Timeout, o.Logf)
	res.Seconds = cmdutil.Round3(time.Since(start).Seconds())
	stopRun()
	wg.Wait()
	e.b.Restore()
	if err := <-prodErr; err != nil && complete {
		return res, err
	}
	// A stop can race with the last samples: start the processor again so
	// that the end of every run is the same (a restart that may write
	// duplicates, then a graceful stop). A SIGKILLed member holds its
	// partitions until its session times out, so give it time.
	settle := 2 * time.Second
	if !p.running() {
		if err := p.start(); err != nil {
			return res, err
		}
		settle = 15 * time.Second
	}
	for _, sp := range scorers {
		if !sp.running() {
			_ = sp.start()
		}
	}
	// Let late duplicates arrive, then stop the processor gracefully.
	cmdutil.SleepCtx(ctx, settle)
	res.CleanShutdown = p.stop(syscall.SIGTERM, 40*time.Second) && p.lastExit() == "exit 0"
	col.poll(ctx)
	cancelCol()

	mu.Lock()
	res.Kills, res.ScorerKills, res.BrokerOutages, res.UnsettledKills, res.UncleanStops = kills, scorerKills, outages, unsettled, unclean
	mu.Unlock()
	res.Comparison = col.compare(ref.samples, validateSample)
	res.DeadLetters, res.DeadByReason = col.deadLetters()
	res.ProcessorStarts = p.starts
	res.UnexpectedExits = p.unexpectedExits()
	logs := []string{p.logf}
	for _, sp := range scorers {
		logs = append(logs, sp.logf)
		res.UnexpectedExits += sp.unexpectedExits()
	}
	res.LogWarnings = logSummary(logs...)
	res.StateResets = stateResets(res.LogWarnings)
	if !complete {
		return res, fmt.Errorf("chaos: %d of %d samples after %v", res.Seen, res.Expected, o.Timeout)
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
