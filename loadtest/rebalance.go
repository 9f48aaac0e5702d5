package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
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
// under load, and compares the two: setup (the broker and the reference
// samples), the replicas, the membership changes while the samples come in,
// a graceful end and the comparison.
func RunRebalance(ctx context.Context, o RebalanceOptions) (RebalanceResult, error) {
	if err := o.check(); err != nil {
		return RebalanceResult{}, err
	}
	dir, err := scratch(o.Dir, "creditflow-rebalance-")
	if err != nil {
		return RebalanceResult{}, err
	}
	res := RebalanceResult{Method: o.Method, Replicas: o.Replicas, Groups: o.Groups, Logs: dir}
	r := &rebalanceRun{o: o, dir: dir, res: &res, w: newWorkload(o.Method, o.Groups, o.Seed)}
	o.Logf("rebalance: building creditflow and starting the embedded broker (logs in %s)", dir)
	if r.e, err = newEnv(ctx, o.Bin, dir, o.Partitions, nopLog()); err != nil {
		return res, err
	}
	defer r.e.Close()
	ref, err := r.reference(ctx)
	if err != nil {
		return res, err
	}
	defer r.killReplicas()
	if err := r.startReplicas(ctx); err != nil {
		return res, err
	}
	r.col = newCollector(r.e, r.t, r.w)
	cctx, cancelCol := context.WithCancel(ctx)
	defer cancelCol()
	go r.col.run(cctx)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	r.ctx = runCtx
	for _, rep := range r.reps {
		go rep.supervise(runCtx)
	}
	r.rng = rand.New(rand.NewPCG(o.Seed, 0x4eba1))
	plan, err := newFaultPlan(r.rng, o.Events, o.Groups)
	if err != nil {
		return res, fmt.Errorf("rebalance: %w", err)
	}
	var wg sync.WaitGroup
	prodErr := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		prodErr <- r.e.produce(runCtx, r.w, r.t.Trajectories, o.ProduceEvery, r.ready(plan))
	}()
	go func() { defer wg.Done(); r.changes(plan) }()
	complete := r.col.await(ctx, runCtx, "rebalance", r.w.expected(), r.start, o.Timeout, o.Logf)
	res.Seconds = cmdutil.Round3(time.Since(r.start).Seconds())
	stopRun()
	wg.Wait()
	if err := <-prodErr; err != nil && complete {
		return res, err
	}
	r.finish(ctx, ref, cancelCol)
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
