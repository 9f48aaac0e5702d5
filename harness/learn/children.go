package learn

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// children are a run's child processes: the processor (`creditflow run`),
// the trainer, the evaluator and the rollout workers, with the command line
// each is started with. The chaos option replaces the processor and worker
// 0 after a SIGKILL; stop ends whatever runs at the time.
type children struct {
	o        Options
	dir      string   // the run folder: the children's working directory and logs
	env      []string // the Python children's environment
	onLine   func(name string, obj map[string]any)
	brokers  string // comma-separated
	init     string // the starting checkpoint
	procArgs []string

	processor, trainer, evaluator *proc
	workers                       []*proc
	procCPU                       float64 // CPU seconds of the processors that ended
}

func newChildren(o Options, dir, pkg, init string, brokers []string, onLine func(string, map[string]any)) *children {
	c := &children{o: o, dir: dir, env: pythonEnv(pkg, o.Python), onLine: onLine, brokers: strings.Join(brokers, ","), init: init}
	t := o.Topics
	c.procArgs = append([]string{o.Exe, "run", "--brokers", c.brokers, "--stage", "both", "--group", o.GroupID,
		"--topic-trajectories", t.Trajectories, "--topic-scored", t.Scored, "--topic-samples", t.Samples,
		"--topic-dead-letters", t.DeadLetters, "--topic-state", t.State, "--topic-policy", t.Policy,
		"--topic-samples-stale", t.SamplesStale, "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10),
		"--scorers", "local", "--scorer-model", init, "--scorer-follow-policy", "--metrics-addr", "", "--log-level", "warn",
		"--session-timeout", "6s", "--commit-interval", "200ms"}, o.processorArgs()...)
	return c
}

// start starts every child: the processor, the trainer, the evaluator and
// the workers. On an error the children started so far are left for stop.
func (c *children) start() error {
	if err := c.startProcessor(); err != nil {
		return err
	}
	if err := c.startTrainer(); err != nil {
		return err
	}
	if err := c.startEvaluator(); err != nil {
		return err
	}
	c.workers = make([]*proc, c.o.Workers)
	for k := range c.workers {
		if err := c.startWorker(k, 0); err != nil {
			return err
		}
	}
	return nil
}

// startProcessor starts (or restarts) the processor.
func (c *children) startProcessor() error {
	p, err := startProc("processor", c.dir, nil, nil, c.procArgs...)
	if err == nil {
		c.processor = p
	}
	return err
}

func (c *children) startTrainer() error {
	o, t := c.o, c.o.Topics
	args := []string{o.Python, "-m", "creditflow.learn.trainer",
		"--brokers", c.brokers, "--samples-topic", t.Samples, "--policy-topic", t.Policy, "--group", o.GroupID + "-trainer",
		"--init", c.init, "--out", filepath.Join(c.dir, "checkpoints"),
		"--steps", strconv.Itoa(o.Steps), "--groups-per-step", strconv.Itoa(o.GroupsPerStep),
		"--lr", ftoa(o.LR), "--seed", strconv.Itoa(o.Seed), "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10),
		"--loss", o.loss(), "--epochs", strconv.Itoa(o.Epochs), "--clip", ftoa(o.Clip), "--is-cap", ftoa(o.ISCap),
		"--gamma", ftoa(o.Gamma), "--gae-lambda", ftoa(o.GAELambda), "--critic-lr", ftoa(o.CriticLR)}
	if o.oracle() {
		args = append(args, "--oracle-labels", c.labels(), "--oracle-lambda", ftoa(o.Lambda))
		if o.OracleOnce {
			args = append(args, "--oracle-once")
		}
	}
	if o.AttnSRTerminal {
		args = append(args, "--step-rewards-at-end")
	}
	if o.Method == MethodAttnSR { // where the step shares landed (alloc_* per step)
		args = append(args, "--credit-labels", c.labels())
	}
	p, err := startProc("trainer", c.dir, c.env, c.onLine, args...)
	c.trainer = p
	return err
}

func (c *children) startEvaluator() error {
	o, t := c.o, c.o.Topics
	p, err := startProc("evaluator", c.dir, c.env, c.onLine, o.Python, "-m", "creditflow.learn.evaluate",
		"--brokers", c.brokers, "--policy-topic", t.Policy, "--init", c.init, "--env", o.World,
		"--episodes", strconv.Itoa(o.EvalEpisodes), "--until-version", strconv.Itoa(o.Steps))
	c.evaluator = p
	return err
}

// startWorker starts (or, restart > 0, restarts with fresh group numbers)
// worker k.
func (c *children) startWorker(k, restart int) error {
	o, t := c.o, c.o.Topics
	args := []string{o.Python, "-m", "creditflow.learn.worker",
		"--brokers", c.brokers, "--topic", t.Trajectories, "--policy-topic", t.Policy, "--init", c.init, "--env", o.World,
		"--run", fmt.Sprintf("s%d", o.Seed), "--worker", strconv.Itoa(k), "--workers", strconv.Itoa(o.Workers),
		"--first-group", strconv.Itoa(restart * 1_000_000), "--group-size", strconv.Itoa(o.GroupSize),
		"--groups-per-version", strconv.Itoa(o.quota(k)), "--last-version", strconv.Itoa(o.Steps - 1), "--seed", strconv.Itoa(o.Seed),
		"--judge-noise", strconv.FormatFloat(o.JudgeNoise, 'g', -1, 64)}
	args = append(args, o.workerArgs()...)
	if o.labelled() { // each start its own file: a killed worker's last line may be cut
		args = append(args, "--labels", filepath.Join(c.labels(), fmt.Sprintf("worker-%d-%d.jsonl", k, restart)))
	}
	p, err := startProc(fmt.Sprintf("worker-%d", k), c.dir, c.env, c.onLine, args...)
	c.workers[k] = p
	return err
}

// labels is the folder of the turn labels (the oracle arms' term, AttnSR's
// alloc_* readings), written by the workers and read by the trainer
// (absolute: the children run in c.dir).
func (c *children) labels() string {
	d, err := filepath.Abs(filepath.Join(c.dir, "labels"))
	if err != nil {
		return filepath.Join(c.dir, "labels")
	}
	return d
}

// stopWorkers lets the workers finish their batch in flight and stop.
func (c *children) stopWorkers() {
	for _, w := range c.workers {
		if w != nil {
			_ = w.stop(60 * time.Second)
		}
	}
}

// stop stops every child still running: the workers, the evaluator, the
// trainer, then the processor.
func (c *children) stop() {
	c.stopWorkers()
	if c.evaluator != nil {
		_ = c.evaluator.stop(5 * time.Second)
	}
	if c.trainer != nil {
		_ = c.trainer.stop(10 * time.Second)
	}
	if c.processor != nil {
		_ = c.processor.stop(30 * time.Second)
	}
}

// stopProcessor stops the processor and counts its CPU time.
func (c *children) stopProcessor() {
	if c.processor == nil {
		return
	}
	_ = c.processor.stop(30 * time.Second)
	c.procCPU += c.processor.cpuSeconds()
}
