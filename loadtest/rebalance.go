package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/vocab"
)

// RebalanceOptions configure a rebalance run.
type RebalanceOptions struct {
	Workload
	Replicas int // `creditflow run` replicas in one consumer group (2 or more)
	Events   int // membership changes under load: a join, then leaves by SIGTERM and SIGKILL, alternating
}

// DefaultRebalance is the default rebalance run.
func DefaultRebalance() RebalanceOptions {
	return RebalanceOptions{Workload: Workload{Groups: 60, Partitions: 4, Method: credit.MethodLAPO, Seed: 7,
		ProduceEvery: 500 * time.Millisecond, Timeout: 10 * time.Minute}, Replicas: 3, Events: 5}
}

// RebalanceResult is what a rebalance run measured. JSON names are stable.
type RebalanceResult struct {
	Method   vocab.Method `json:"method"`
	Replicas int          `json:"replicas"`
	Groups   int          `json:"groups"`
	Joins    int          `json:"joins"`
	Terms    int          `json:"sigterm_leaves"`
	Kills    int          `json:"sigkill_leaves"`
	Events   []string     `json:"events"`
	Comparison
	DeadLetters      int            `json:"dead_letters"`
	DeadByReason     map[string]int `json:"dead_letters_by_reason,omitempty"`
	SlowTerms        int            `json:"sigterm_not_exited_in_time"`
	Unsettled        int            `json:"unsettled_changes"`
	UnexpectedExits  int            `json:"unexpected_exits"`
	Seconds          float64        `json:"seconds"`
	ReferenceSeconds float64        `json:"reference_seconds"`
	LogWarnings      map[string]int `json:"log_warnings,omitempty"`
	Logs             string         `json:"logs"`
}

// RunRebalance runs the reference and then replicas that leave and join
// under load, and compares the two.
func RunRebalance(ctx context.Context, o RebalanceOptions) (RebalanceResult, error) {
	if o.Replicas < 2 {
		return RebalanceResult{}, fmt.Errorf("--replicas must be at least 2")
	}
	if o.Groups <= 0 || o.Partitions <= 0 || o.Events < 0 {
		return RebalanceResult{}, fmt.Errorf("--groups and --partitions must be positive, --events not negative")
	}
	if o.Method != credit.MethodLAPO && o.Method != credit.MethodAttnSR {
		return RebalanceResult{}, fmt.Errorf("--method %q: use lapo or attnsr", o.Method)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	dir, err := scratch(o.Dir, "creditflow-rebalance-")
	if err != nil {
		return RebalanceResult{}, err
	}
	res := RebalanceResult{Method: o.Method, Replicas: o.Replicas, Groups: o.Groups, Logs: dir}
	o.Logf("rebalance: building creditflow and starting the embedded broker (logs in %s)", dir)
	e, err := newEnv(ctx, o.Bin, dir, o.Partitions, nopLog())
	if err != nil {
		return res, err
	}
	defer e.Close()
	w := newWorkload(o.Method, o.Groups, o.Seed)
	o.Logf("rebalance: reference run (one uninterrupted processor): %d groups, %s", o.Groups, o.Method)
	ref, err := runReference(ctx, e, w, o.Method, o.Timeout)
	if err != nil {
		return res, err
	}
	res.ReferenceSeconds = cmdutil.Round3(ref.seconds)
	o.Logf("rebalance: reference done in %.1fs", ref.seconds)

	t := topicsFor("rebal")
	if err := e.createTopics(ctx, t); err != nil {
		return res, err
	}
	start := time.Now()
	reps := make([]*proc, o.Replicas)
	for i := range reps {
		reps[i] = newProc(fmt.Sprintf("replica-%d", i), e.bin, dir, processorArgs(e.brokers, "rebal", t, o.Method, nil)...)
		defer reps[i].stop(syscall.SIGKILL, 5*time.Second)
	}
	// All but the last replica start now; the last one joins under load.
	for _, r := range reps[:o.Replicas-1] {
		if err := r.start(); err != nil {
			return res, err
		}
	}
	col := newCollector(e, t, w)
	cctx, cancelCol := context.WithCancel(ctx)
	defer cancelCol()
	go col.run(cctx)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	for _, r := range reps {
		go r.supervise(runCtx)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x4eba1))
	plan, err := newFaultPlan(rng, o.Events, o.Groups)
	if err != nil {
		return res, fmt.Errorf("rebalance: %w", err)
	}
	var mu sync.Mutex // guards res's counters, rng, the events list, done and over
	done, over := 0, false
	ready := func(g int) bool {
		mu.Lock()
		defer mu.Unlock()
		return over || done >= plan.segment(g)
	}
	var wg sync.WaitGroup
	prodErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); prodErr <- e.produce(runCtx, w, t.Trajectories, o.ProduceEvery, ready) }()

	note := func(format string, args ...any) {
		s, _ := col.progress()
		msg := fmt.Sprintf("%.1fs %d/%d samples: ", time.Since(start).Seconds(), s, w.expected()) + fmt.Sprintf(format, args...)
		mu.Lock()
		res.Events = append(res.Events, msg)
		mu.Unlock()
		o.Logf("rebalance: %s", msg)
	}
	groupIDs := []string{"rebal.score", "rebal.advantage"}
	// Membership changes are made one at a time: each waits until both
	// consumer groups are Stable with every running replica in them (see
	// groupsSettled), and a replica that left rejoins before the next change.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			mu.Lock()
			over = true
			mu.Unlock()
		}()
		eventDone := func() {
			mu.Lock()
			done++
			mu.Unlock()
		}
		seenAtLeast := func(n int) bool { s, _ := col.progress(); return s >= n }
		for i, target := range plan.targets {
			for !seenAtLeast(target) {
				if !cmdutil.SleepCtx(runCtx, 100*time.Millisecond) {
					return
				}
			}
			if seenAtLeast(w.expected()) {
				return
			}
			if i == 0 {
				if err := reps[o.Replicas-1].start(); err == nil {
					mu.Lock()
					res.Joins++
					mu.Unlock()
					note("%s joins", reps[o.Replicas-1].name)
				}
				eventDone()
				continue
			}
			var running []*proc
			for _, r := range reps {
				if r.running() {
					running = append(running, r)
				}
			}
			if len(running) < 2 {
				eventDone()
				continue // keep one member
			}
			if !cmdutil.WaitSettled(runCtx, e.brokers, len(running), time.Minute, groupIDs...) {
				if runCtx.Err() != nil {
					return
				}
				mu.Lock()
				res.Unsettled++
				mu.Unlock()
				note("consumer groups not settled after a minute; changing membership anyway")
			}
			mu.Lock()
			r := running[rng.IntN(len(running))]
			back := jitter(rng, 2*time.Second, 6*time.Second)
			mu.Unlock()
			if i%2 == 1 {
				note("%s leaves (SIGTERM)", r.name)
				exited := r.stop(syscall.SIGTERM, 40*time.Second)
				mu.Lock()
				res.Terms++
				if !exited {
					res.SlowTerms++
				}
				mu.Unlock()
				note("%s exited (%s)", r.name, r.lastExit())
			} else {
				r.stop(syscall.SIGKILL, 5*time.Second)
				mu.Lock()
				res.Kills++
				mu.Unlock()
				note("%s killed (SIGKILL)", r.name)
			}
			eventDone() // the next part of the input flows while r is away
			if !cmdutil.SleepCtx(runCtx, back) {
				return
			}
			if r.start() == nil {
				mu.Lock()
				res.Joins++
				mu.Unlock()
				note("%s rejoins", r.name)
			}
		}
	}()
	complete := col.await(ctx, runCtx, "rebalance", w.expected(), start, o.Timeout, o.Logf)
	res.Seconds = cmdutil.Round3(time.Since(start).Seconds())
	stopRun()
	wg.Wait()
	if err := <-prodErr; err != nil && complete {
		return res, err
	}
	cmdutil.SleepCtx(ctx, 2*time.Second)
	var logs []string
	for _, r := range reps {
		if r.running() && !r.stop(syscall.SIGTERM, 40*time.Second) {
			res.SlowTerms++
		}
		logs = append(logs, r.logf)
		res.UnexpectedExits += r.unexpectedExits()
	}
	col.poll(ctx)
	cancelCol()
	res.Comparison = col.compare(ref.samples, validateSample)
	res.DeadLetters, res.DeadByReason = col.deadLetters()
	res.LogWarnings = logSummary(logs...)
	if !complete {
		return res, fmt.Errorf("rebalance: %d of %d samples after %v", res.Seen, res.Expected, o.Timeout)
	}
	return res, nil
}

func rebalanceCmd(args []string) (int, error) {
	o := DefaultRebalance()
	fs := flag.NewFlagSet("rebalance", flag.ContinueOnError)
	o.Workload.addFlags(fs)
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "creditflow run replicas in one consumer group (2 or more)")
	fs.IntVar(&o.Events, "events", o.Events, "membership changes under load: one join, then leaves by SIGTERM and SIGKILL in turn (each rejoins a few seconds later)")
	return runCommand(fs, args, &o.Workload, "rebalance",
		func(ctx context.Context) (RebalanceResult, error) { return RunRebalance(ctx, o) },
		printRebalance, func(r RebalanceResult) Comparison { return r.Comparison })
}

func printRebalance(r RebalanceResult) {
	w := os.Stdout
	fmt.Fprintf(w, "method            %s, %d groups, %d replicas\n", r.Method, r.Groups, r.Replicas)
	fmt.Fprintf(w, "membership        %d joins, %d SIGTERM leaves (%d not exited in time), %d SIGKILL leaves; %d changes while the groups were unsettled\n",
		r.Joins, r.Terms, r.SlowTerms, r.Kills, r.Unsettled)
	for _, ev := range r.Events {
		fmt.Fprintf(w, "  %s\n", ev)
	}
	printOutcome(r.Comparison, r.DeadLetters, r.DeadByReason, r.UnexpectedExits, "replicas")
	fmt.Fprintf(w, "time              %.1fs, reference %.1fs\n", r.Seconds, r.ReferenceSeconds)
	printTail(r.Comparison, r.LogWarnings, r.Logs)
}
