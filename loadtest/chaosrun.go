package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
)

// chaosRun is the chaos phase of RunChaos: the processor and scorer
// processes, the collector of their samples, the fault loops that stop,
// kill and cut them, and what those loops counted.
type chaosRun struct {
	o      ChaosOptions
	e      *env
	w      workload
	t      stage.Topics
	dir    string
	sig    syscall.Signal
	signal string // sig's name, for the log

	rmu sync.Mutex // guards rng: the fault loops draw from it concurrently
	rng *rand.Rand

	start   time.Time
	ctx     context.Context // the run's: ends when the samples are complete or time is up
	p       *proc
	scorers []*proc
	col     *collector

	mu                                              sync.Mutex // guards the counts and killsOver
	kills, scorerKills, outages, unsettled, unclean int
	killsOver                                       bool // the kill loop ended: hold nothing back any more
}

// rnd draws a duration from the run's random source.
func (c *chaosRun) rnd(f func(r *rand.Rand) time.Duration) time.Duration {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return f(c.rng)
}

// newChaosRun checks o, makes the scratch directory and the result the run
// fills.
func newChaosRun(o ChaosOptions) (*chaosRun, ChaosResult, error) {
	if err := o.check(); err != nil {
		return nil, ChaosResult{}, err
	}
	dir, err := scratch(o.Dir, "creditflow-chaos-")
	if err != nil {
		return nil, ChaosResult{}, err
	}
	res := ChaosResult{Method: o.Method, Groups: o.Groups, StatePartitions: o.StatePartitions, Logs: dir, Signal: "SIGKILL"}
	c := &chaosRun{o: o, dir: dir, sig: syscall.SIGKILL, rng: rand.New(rand.NewPCG(o.Seed, 0xc4a05))}
	if o.Graceful {
		c.sig, res.Signal = syscall.SIGTERM, "SIGTERM"
	}
	c.signal = res.Signal
	c.w = newWorkload(o.Method, o.Groups, o.Seed)
	return c, res, nil
}

// reference runs the workload through one uninterrupted processor: the
// samples the chaos phase must reproduce.
func (c *chaosRun) reference(ctx context.Context, res *ChaosResult) (refResult, error) {
	c.e.state = c.o.StatePartitions
	c.o.Logf("chaos: reference run (uninterrupted): %d groups of %d, %s", c.o.Groups, groupSize, c.o.Method)
	ref, err := runReference(ctx, c.e, c.w, c.o.Method, c.o.Timeout)
	if err != nil {
		return ref, err
	}
	res.ReferenceSeconds = cmdutil.Round3(ref.seconds)
	c.o.Logf("chaos: reference done in %.1fs", ref.seconds)
	return ref, nil
}

// startProcesses makes the chaos topics and starts the scorer processes and
// the processor; the run's clock starts with them.
func (c *chaosRun) startProcesses(ctx context.Context) error {
	c.t = topicsFor("chaos")
	if err := c.e.createTopics(ctx, c.t); err != nil {
		return err
	}
	c.start = time.Now()
	urls, err := c.startScorers()
	if err != nil {
		return err
	}
	c.p = newProc("processor", c.e.bin, c.dir, processorArgs(c.e.brokers, "chaos", c.t, c.o.Method, urls)...)
	return c.p.start()
}

// startScorers starts the scorer processes (with ScorerProcess) and returns
// their URLs. Every scorer started is in c.scorers, also on an error.
func (c *chaosRun) startScorers() ([]string, error) {
	var urls []string
	if !c.o.ScorerProcess {
		return nil, nil
	}
	for i := 0; i < c.o.Scorers; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		bin, args, err := scorerCommand(c.e.bin, addr)
		if err != nil {
			return nil, err
		}
		sp := newProc(fmt.Sprintf("scorer-%d", i), bin, c.dir, args...)
		if err := sp.start(); err != nil {
			return nil, err
		}
		c.scorers = append(c.scorers, sp)
		urls = append(urls, "http://"+addr)
	}
	return urls, nil
}

// stopScorers stops the scorer processes, the last started first.
func (c *chaosRun) stopScorers() {
	for i := len(c.scorers) - 1; i >= 0; i-- {
		c.scorers[i].stop(syscall.SIGTERM, 10*time.Second)
	}
}

// plan draws when the processor stops (spread over the run, faultPlan)
// and at what progress the broker is cut.
func (c *chaosRun) plan() (faultPlan, []int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	plan, err := newFaultPlan(c.rng, c.o.Kills, c.o.Groups)
	outageAt := progressTargets(c.rng, c.o.BrokerOutages, c.w.expected())
	return plan, outageAt, err
}

// seenAtLeast reports whether n distinct samples were collected.
func (c *chaosRun) seenAtLeast(n int) bool { s, _ := c.col.progress(); return s >= n }

// waitUntil polls cond until it holds (true) or the run ends (false).
func (c *chaosRun) waitUntil(cond func() bool) bool {
	for !cond() {
		if !cmdutil.SleepCtx(c.ctx, 100*time.Millisecond) {
			return false
		}
	}
	return true
}

// count adds one to *n under the counts' lock.
func (c *chaosRun) count(n *int) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

// faults starts the producer and the fault loops: processor stops at random
// moments spread over the run (plan), scorer kills with KillScorers, and
// broker cuts at the outageAt progress points. wg ends with all of them;
// the producer's error comes on the returned channel.
func (c *chaosRun) faults(wg *sync.WaitGroup, plan faultPlan, outageAt []int) <-chan error {
	ready := func(g int) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.killsOver || c.kills >= plan.segment(g)
	}
	prodErr := make(chan error, 1)
	loops := []func(){
		func() { prodErr <- c.e.produce(c.ctx, c.w, c.t.Trajectories, c.o.ProduceEvery, ready) },
		func() { c.stopProcessor(plan) },
	}
	if c.o.KillScorers {
		loops = append(loops, c.killScorers)
	}
	if c.o.BrokerOutages > 0 {
		loops = append(loops, func() { c.cutBroker(outageAt) })
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop()
		}()
	}
	return prodErr
}

// stopProcessor stops the processor (by c.sig) once per plan target, when
// that many samples were seen and it has been up a random while, and starts
// it again after a random pause.
func (c *chaosRun) stopProcessor(plan faultPlan) {
	defer func() {
		c.mu.Lock()
		c.killsOver = true
		c.mu.Unlock()
	}()
	for i, target := range plan.targets {
		started := time.Now()
		up := c.rnd(func(r *rand.Rand) time.Duration { return jitter(r, time.Second, 5*time.Second) })
		if !c.waitUntil(func() bool { return c.seenAtLeast(target) && time.Since(started) >= up }) {
			return
		}
		if c.seenAtLeast(c.w.expected()) {
			return
		}
		if !cmdutil.WaitSettled(c.ctx, c.e.brokers, 1, time.Minute, "chaos.score", "chaos.advantage") {
			if c.ctx.Err() != nil {
				return
			}
			c.count(&c.unsettled)
			c.o.Logf("chaos: the consumer groups did not settle within a minute; stopping the processor anyway")
		}
		exited := c.p.stop(c.sig, 40*time.Second)
		c.mu.Lock()
		c.kills++
		if c.o.Graceful && (!exited || c.p.lastExit() != "exit 0") {
			c.unclean++
		}
		c.mu.Unlock()
		seen, _ := c.col.progress()
		c.o.Logf("chaos: %s %d/%d of the processor at %d/%d samples (%.1fs; exited by itself: %v, %s)", c.signal, i+1, c.o.Kills, seen, c.w.expected(),
			time.Since(c.start).Seconds(), exited, c.p.lastExit())
		if !cmdutil.SleepCtx(c.ctx, c.rnd(func(r *rand.Rand) time.Duration { return jitter(r, 0, time.Second) })) {
			return
		}
		if err := c.p.start(); err != nil {
			c.o.Logf("chaos: restart failed: %v", err)
			return
		}
	}
}

// killScorers SIGKILLs a random scorer process every few seconds and starts
// it again, until every sample was seen.
func (c *chaosRun) killScorers() {
	for !c.seenAtLeast(c.w.expected()) {
		if !cmdutil.SleepCtx(c.ctx, c.rnd(func(r *rand.Rand) time.Duration { return jitter(r, 3*time.Second, 8*time.Second) })) {
			return
		}
		c.rmu.Lock()
		sp := c.scorers[c.rng.IntN(len(c.scorers))]
		c.rmu.Unlock()
		sp.stop(syscall.SIGKILL, 5*time.Second)
		c.count(&c.scorerKills)
		c.o.Logf("chaos: SIGKILL of %s (%.1fs)", sp.name, time.Since(c.start).Seconds())
		cmdutil.SleepCtx(c.ctx, c.rnd(func(r *rand.Rand) time.Duration { return jitter(r, time.Second, 3*time.Second) }))
		if err := sp.start(); err != nil {
			c.o.Logf("chaos: scorer restart failed: %v", err)
		}
	}
}

// cutBroker cuts the broker off for OutageLength at each progress point.
func (c *chaosRun) cutBroker(outageAt []int) {
	for _, target := range outageAt {
		if !c.waitUntil(func() bool { return c.seenAtLeast(target) }) || c.seenAtLeast(c.w.expected()) {
			return
		}
		c.e.b.Cut()
		c.o.Logf("chaos: broker cut for %v (%.1fs)", c.o.OutageLength, time.Since(c.start).Seconds())
		cmdutil.SleepCtx(c.ctx, c.o.OutageLength)
		c.e.b.Restore()
		c.count(&c.outages)
	}
}

// finish makes the end of every run the same: a processor stopped by the
// last fault (a stop can race with the last samples) starts again, which
// may write duplicates, stopped scorers start again, late duplicates get
// time to arrive, and the processor stops gracefully. It reports whether
// that stop was clean. A SIGKILLed member holds its partitions until its
// session times out, so a restarted processor gets longer to settle.
func (c *chaosRun) finish(ctx context.Context) (clean bool, err error) {
	settle := 2 * time.Second
	if !c.p.running() {
		if err := c.p.start(); err != nil {
			return false, err
		}
		settle = 15 * time.Second
	}
	for _, sp := range c.scorers {
		if !sp.running() {
			_ = sp.start()
		}
	}
	cmdutil.SleepCtx(ctx, settle)
	return c.p.stop(syscall.SIGTERM, 40*time.Second) && c.p.lastExit() == "exit 0", nil
}

// summarise fills res with what the run counted, the comparison of its
// samples with the reference's, and what the processes logged.
func (c *chaosRun) summarise(res *ChaosResult, ref refResult) {
	c.mu.Lock()
	res.Kills, res.ScorerKills, res.BrokerOutages, res.UnsettledKills, res.UncleanStops = c.kills, c.scorerKills, c.outages, c.unsettled, c.unclean
	c.mu.Unlock()
	res.Comparison = c.col.compare(ref.samples, validateSample)
	res.DeadLetters, res.DeadByReason = c.col.deadLetters()
	res.ProcessorStarts = c.p.starts
	res.UnexpectedExits = c.p.unexpectedExits()
	logs := []string{c.p.logf}
	for _, sp := range c.scorers {
		logs = append(logs, sp.logf)
		res.UnexpectedExits += sp.unexpectedExits()
	}
	res.LogWarnings = logSummary(logs...)
	res.StateResets = stateResets(res.LogWarnings)
}
