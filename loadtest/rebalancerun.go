package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
)

// rebalanceRun is the phase of RunRebalance under load: the replicas, the
// collector of their samples, and the membership changes with what they
// counted (in res).
type rebalanceRun struct {
	o   RebalanceOptions
	e   *env
	w   workload
	t   stage.Topics
	dir string

	start time.Time
	ctx   context.Context // the run's: ends when the samples are complete or time is up
	reps  []*proc
	col   *collector

	mu   sync.Mutex // guards res's counters, rng, the events list, done and over
	res  *RebalanceResult
	rng  *rand.Rand
	done int  // membership changes made
	over bool // the changes ended: hold nothing back any more
}

func (o *RebalanceOptions) check() error {
	switch {
	case o.Replicas < 2:
		return fmt.Errorf("--replicas must be at least 2")
	case o.Groups <= 0 || o.Partitions <= 0 || o.Events < 0:
		return fmt.Errorf("--groups and --partitions must be positive, --events not negative")
	case o.Method != credit.MethodLAPO && o.Method != credit.MethodAttnSR:
		return fmt.Errorf("--method %q: use lapo or attnsr", o.Method)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// reference runs the workload through one uninterrupted processor: the
// samples the replicas must reproduce.
func (r *rebalanceRun) reference(ctx context.Context) (refResult, error) {
	r.o.Logf("rebalance: reference run (one uninterrupted processor): %d groups, %s", r.o.Groups, r.o.Method)
	ref, err := runReference(ctx, r.e, r.w, r.o.Method, r.o.Timeout)
	if err != nil {
		return ref, err
	}
	r.res.ReferenceSeconds = cmdutil.Round3(ref.seconds)
	r.o.Logf("rebalance: reference done in %.1fs", ref.seconds)
	return ref, nil
}

// startReplicas makes the rebalance topics and the replicas, and starts
// all but the last, which joins under load; the run's clock starts with
// them.
func (r *rebalanceRun) startReplicas(ctx context.Context) error {
	r.t = topicsFor("rebal")
	if err := r.e.createTopics(ctx, r.t); err != nil {
		return err
	}
	r.start = time.Now()
	r.reps = make([]*proc, r.o.Replicas)
	for i := range r.reps {
		r.reps[i] = newProc(fmt.Sprintf("replica-%d", i), r.e.bin, r.dir, processorArgs(r.e.brokers, "rebal", r.t, r.o.Method, nil)...)
	}
	for _, rep := range r.reps[:r.o.Replicas-1] {
		if err := rep.start(); err != nil {
			return err
		}
	}
	return nil
}

// killReplicas SIGKILLs the replicas still running, the last first.
func (r *rebalanceRun) killReplicas() {
	for i := len(r.reps) - 1; i >= 0; i-- {
		r.reps[i].stop(syscall.SIGKILL, 5*time.Second)
	}
}

// note records a membership event (with the time and the samples so far)
// and logs it.
func (r *rebalanceRun) note(format string, args ...any) {
	s, _ := r.col.progress()
	msg := fmt.Sprintf("%.1fs %d/%d samples: ", time.Since(r.start).Seconds(), s, r.w.expected()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.res.Events = append(r.res.Events, msg)
	r.mu.Unlock()
	r.o.Logf("rebalance: %s", msg)
}

// count adds one to *n, a counter of res, under the lock.
func (r *rebalanceRun) count(n *int) {
	r.mu.Lock()
	*n++
	r.mu.Unlock()
}

func (r *rebalanceRun) seenAtLeast(n int) bool { s, _ := r.col.progress(); return s >= n }

// ready tells the producer whether group g may be written: the input is
// held back until the changes planned before it were made.
func (r *rebalanceRun) ready(plan faultPlan) func(g int) bool {
	return func(g int) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.over || r.done >= plan.segment(g)
	}
}

// changes makes the membership changes one at a time, at the plan's
// targets: each waits until both consumer groups are Stable with every
// running replica in them (see groupsSettled), and a replica that left
// rejoins before the next change.
func (r *rebalanceRun) changes(plan faultPlan) {
	defer func() {
		r.mu.Lock()
		r.over = true
		r.mu.Unlock()
	}()
	for i, target := range plan.targets {
		for !r.seenAtLeast(target) {
			if !cmdutil.SleepCtx(r.ctx, 100*time.Millisecond) {
				return
			}
		}
		if r.seenAtLeast(r.w.expected()) || !r.change(i) {
			return
		}
	}
}

// change makes membership change i: the first is the last replica joining;
// later ones a running replica leaving, by SIGTERM (odd i) or SIGKILL, and
// rejoining a few seconds later. It reports false when the run ended.
func (r *rebalanceRun) change(i int) bool {
	if i == 0 {
		last := r.reps[r.o.Replicas-1]
		if err := last.start(); err == nil {
			r.count(&r.res.Joins)
			r.note("%s joins", last.name)
		}
		r.count(&r.done)
		return true
	}
	var running []*proc
	for _, rep := range r.reps {
		if rep.running() {
			running = append(running, rep)
		}
	}
	if len(running) < 2 {
		r.count(&r.done)
		return true // keep one member
	}
	if !cmdutil.WaitSettled(r.ctx, r.e.brokers, len(running), time.Minute, "rebal.score", "rebal.advantage") {
		if r.ctx.Err() != nil {
			return false
		}
		r.count(&r.res.Unsettled)
		r.note("consumer groups not settled after a minute; changing membership anyway")
	}
	r.mu.Lock()
	rep := running[r.rng.IntN(len(running))]
	back := jitter(r.rng, 2*time.Second, 6*time.Second)
	r.mu.Unlock()
	r.leave(rep, i%2 == 1)
	r.count(&r.done) // the next part of the input flows while rep is away
	if !cmdutil.SleepCtx(r.ctx, back) {
		return false
	}
	if rep.start() == nil {
		r.count(&r.res.Joins)
		r.note("%s rejoins", rep.name)
	}
	return true
}

// leave stops rep: gracefully by SIGTERM (term) or by SIGKILL.
func (r *rebalanceRun) leave(rep *proc, term bool) {
	if !term {
		rep.stop(syscall.SIGKILL, 5*time.Second)
		r.count(&r.res.Kills)
		r.note("%s killed (SIGKILL)", rep.name)
		return
	}
	r.note("%s leaves (SIGTERM)", rep.name)
	exited := rep.stop(syscall.SIGTERM, 40*time.Second)
	r.mu.Lock()
	r.res.Terms++
	if !exited {
		r.res.SlowTerms++
	}
	r.mu.Unlock()
	r.note("%s exited (%s)", rep.name, rep.lastExit())
}

// finish lets late samples arrive, stops the replicas gracefully and
// compares the samples with the reference's.
func (r *rebalanceRun) finish(ctx context.Context, ref refResult, cancelCol context.CancelFunc) {
	cmdutil.SleepCtx(ctx, 2*time.Second)
	var logs []string
	for _, rep := range r.reps {
		if rep.running() && !rep.stop(syscall.SIGTERM, 40*time.Second) {
			r.res.SlowTerms++
		}
		logs = append(logs, rep.logf)
		r.res.UnexpectedExits += rep.unexpectedExits()
	}
	r.col.poll(ctx)
	cancelCol()
	r.res.Comparison = r.col.compare(ref.samples, validateSample)
	r.res.DeadLetters, r.res.DeadByReason = r.col.deadLetters()
	r.res.LogWarnings = logSummary(logs...)
}
