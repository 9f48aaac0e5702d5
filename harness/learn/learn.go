// Package learn closes the training loop on one machine: rollout workers act
// in an interactive world with the current policy, creditflow scores their
// trajectories with the weights the trainer last announced and turns rewards
// into per-token advantages, and a trainer takes policy-gradient steps on
// them, writes checkpoints and announces each new version, which the workers
// and the scorer load. `creditflow learn` is built on it (docs/learn.md).
//
// What a run guarantees and reports:
//   - every process is real: the processor is `creditflow run` (its own
//     process, with the in-process scorer following the policy topic), the
//     workers and the trainer are the Python package's creditflow.learn
//     modules run by the system Python, all talking Kafka (the embedded broker
//     by default);
//   - held-out success by policy version, from the trainer's evaluation on
//     fixed seeds with fixed decoding;
//   - every trajectory the workers had acknowledged is found afterwards in the
//     samples topic or the stale topic (lost = 0), also after the chaos
//     option's SIGKILLs of the processor and of a worker;
//   - what the loop spent its time on (sampling, scoring, training, waiting).
package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// quota is the groups worker k plays under one version: GroupsPerVersion
// when set, else its share of GroupsPerStep (the first GroupsPerStep mod
// Workers workers play one more), so that one version's groups are one
// trainer step's.
func (o Options) quota(k int) int {
	if o.GroupsPerVersion > 0 {
		return o.GroupsPerVersion
	}
	q := o.GroupsPerStep / o.Workers
	if k < o.GroupsPerStep%o.Workers {
		q++
	}
	return q
}

// processorArgs are the credit flags of `creditflow run` for o's method.
func (o Options) processorArgs() []string {
	switch o.Method {
	case MethodGRPO, MethodOracle: // the oracle's term is the trainer's
		return []string{"--method", MethodLAPO, "--lambda", "0"}
	case MethodPPO:
		return []string{"--method", MethodAttnSR, "--attnsr-output", string(vocab.OutputPPO), "--beta", "0"}
	case MethodAttnSR:
		a := []string{"--method", MethodAttnSR, "--attnsr-output", o.AttnSROutput, "--beta", ftoa(o.Beta)}
		if o.AttnSRUniform {
			a = append(a, "--rho", "0", "--eta", "0")
		}
		return a
	}
	a := []string{"--method", MethodLAPO, "--lambda", ftoa(o.Lambda), "--direction", o.Direction}
	if o.NoGate {
		a = append(a, "--no-gate")
	}
	return a
}

// workerArgs are the reward flags of the workers for o's arm (none for the
// judge's verdict with the true gold).
func (o Options) workerArgs() []string {
	var a []string
	if o.Reward != "" && o.Reward != RewardJudge {
		a = append(a, "--reward", o.Reward, "--gold-bonus", ftoa(o.GoldBonus))
	}
	if o.LabelNoise {
		a = append(a, "--label-noise")
	}
	return a
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// run is the state of one run.
type run struct {
	o           Options
	log         zerolog.Logger
	mu          sync.Mutex
	evals       []Eval
	steps       int
	done        map[string]any
	pubIDs      map[string]bool
	sampling    float64 // worker seconds spent playing episodes
	evalSeconds float64
	stepTraj    map[int64]int // policy version -> trajectories the trainer had consumed when it announced it
	trainSteps  []TrainerStep
	trainErr    string // the trainer's error line: input it cannot train on
	stepCh      chan int
}

// Run runs the loop until the trainer has taken o.Steps steps (or the
// timeout passes) and returns the summary: setup (options, run folder,
// Kafka), the child processes, the loop with its chaos, the drain and the
// accounting of every trajectory published.
func Run(ctx context.Context, o Options) (sum Summary, err error) {
	if o, err = prepare(ctx, o); err != nil {
		return Summary{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "creditflow-learn-"); err != nil {
			return Summary{}, err
		}
		// A failed run keeps its folder: its errors point to the logs in it.
		defer func() {
			if err == nil {
				os.RemoveAll(dir)
			} else {
				err = fmt.Errorf("%w (the run folder %s with its logs is kept; remove it when done)", err, dir)
			}
		}()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return Summary{}, err
	}
	pkg, err := writePackage(dir)
	if err != nil {
		return Summary{}, fmt.Errorf("learn: write the Python package: %w", err)
	}
	brokers, closeBroker, err := startKafka(ctx, o)
	if err != nil {
		return Summary{}, err
	}
	defer closeBroker()

	r := &run{o: o, log: o.Logger, pubIDs: map[string]bool{}, stepCh: make(chan int, 1024), stepTraj: map[int64]int{0: 0}}
	c := newChildren(o, dir, pkg, startCheckpoint(pkg, o.World), brokers, r.onLine)
	defer c.stop()
	if err := c.start(); err != nil {
		return Summary{}, err
	}
	sum = Summary{Method: o.Method, World: o.World, Seed: o.Seed, Settings: settingsOf(o), Commit: sourceCommit()}
	runErr := r.windDown(ctx, c, r.loop(ctx, c, &sum))
	sum.Seconds = time.Since(start).Seconds()
	runErr = r.account(c, brokers, &sum, runErr)
	if o.Dir != "" {
		r.log.Info().Str("dir", dir).Msg("run folder kept")
	}
	return sum, runErr
}

// prepare validates o, resolves its defaults and finds the Python to run
// the workers and the trainer with.
func prepare(ctx context.Context, o Options) (Options, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	o = o.resolved()
	if o.Exe == "" {
		return o, errors.New("learn: the creditflow binary to run the processor from is not set")
	}
	if o.Python == "" {
		var err error
		if o.Python, err = FindPython(ctx, os.Stderr); err != nil {
			return o, err
		}
	}
	return o, nil
}

// startKafka starts the embedded broker unless Options.Brokers names a
// cluster, and makes the loop's topics; stop stops the broker it started.
func startKafka(ctx context.Context, o Options) (brokers []string, stop func(), err error) {
	brokers, stop = o.Brokers, func() {}
	if len(brokers) == 0 {
		b, err := broker.Start(broker.WithDefaultPartitions(o.Partitions), broker.WithLogger(o.Logger))
		if err != nil {
			return nil, stop, err
		}
		brokers, stop = b.Addrs(), func() { b.Close() }
	}
	cfg := stage.DefaultConfig()
	cfg.Topics = o.Topics
	if err := producers.EnsureTopics(ctx, brokers, cfg.Security, cfg.TopicSpecs(o.Partitions)...); err != nil {
		stop()
		return nil, func() {}, fmt.Errorf("learn: create topics: %w", err)
	}
	return brokers, stop, nil
}

// loop waits for the trainer to finish, applying the chaos option's kills
// at the steps the trainer reports; it ends early when the processor stops
// or ctx ends.
func (r *run) loop(ctx context.Context, c *children, sum *Summary) error {
	for {
		select {
		case <-c.trainer.done:
			return nil
		case step := <-r.stepCh:
			if !r.o.Chaos {
				continue
			}
			if err := r.chaos(c, step, sum); err != nil {
				return err
			}
		case <-c.processor.done:
			return fmt.Errorf("learn: the processor stopped: %v (see %s)", c.processor.err, filepath.Join(c.dir, "processor.log"))
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("learn: interrupted at trainer step %d of %d", r.stepsDone(), r.o.Steps)
			}
			return fmt.Errorf("learn: gave up after %v (trainer at step %d of %d)", r.o.Timeout, r.stepsDone(), r.o.Steps)
		}
	}
}

// chaos SIGKILLs and restarts the processor once a third of the steps are
// done, and worker 0 (with fresh group numbers) once half are.
func (r *run) chaos(c *children, step int, sum *Summary) error {
	if sum.ProcessorKills == 0 && step >= max(1, r.o.Steps/3) {
		r.log.Warn().Int("step", step).Msg("chaos: SIGKILL of the processor")
		c.processor.kill()
		c.procCPU += c.processor.cpuSeconds()
		sum.ProcessorKills++
		if err := c.startProcessor(); err != nil {
			c.processor = nil // killed: nothing left to stop or count
			return err
		}
	}
	if sum.WorkerKills == 0 && step >= max(2, r.o.Steps/2) {
		r.log.Warn().Int("step", step).Msg("chaos: SIGKILL of worker 0")
		c.workers[0].kill()
		sum.WorkerKills++
		if err := c.startWorker(0, 1); err != nil {
			return err
		}
	}
	return nil
}

// windDown ends the loop after the trainer: the trainer's own failure
// becomes the run's error, the workers stop after their batch in flight is
// acknowledged (the processor then works off what they published), and the
// evaluator finishes the versions announced.
func (r *run) windDown(ctx context.Context, c *children, runErr error) error {
	if runErr == nil && c.trainer.err != nil {
		runErr = fmt.Errorf("learn: the trainer failed: %v (see %s)", c.trainer.err, filepath.Join(c.dir, "trainer.log"))
		if msg := r.trainerError(); msg != "" {
			runErr = fmt.Errorf("learn: the trainer stopped: %s", msg)
		}
	}
	c.stopWorkers()
	if runErr == nil {
		select {
		case <-c.evaluator.done:
			if c.evaluator.err != nil {
				runErr = fmt.Errorf("learn: the evaluator failed: %v (see %s)", c.evaluator.err, filepath.Join(c.dir, "evaluator.log"))
			}
		case <-ctx.Done():
			runErr = fmt.Errorf("learn: gave up after %v waiting for the evaluation of the last versions", r.o.Timeout)
		}
	}
	return runErr
}

// account finds every trajectory the workers published in the samples or
// the stale topic (drain), stops the processor and completes the summary;
// a lost trajectory is the run's error when it has none yet.
func (r *run) account(c *children, brokers []string, sum *Summary, runErr error) error {
	published := r.published()
	sum.Trajectories = len(published)
	found, stale, ferr := r.drain(context.Background(), brokers, published, time.Minute)
	if ferr != nil && runErr == nil {
		runErr = ferr
	}
	sum.StaleSamples = stale
	for id := range published {
		if !found[id] {
			sum.Lost++
		}
	}
	c.stopProcessor()
	r.fill(sum, c.procCPU)
	if runErr == nil && sum.Lost > 0 {
		runErr = fmt.Errorf("learn: %d trajectories published by the workers are in neither the samples nor the stale topic", sum.Lost)
	}
	return runErr
}

// onLine handles one JSON line of a Python child.
func (r *run) onLine(name string, obj map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch obj["event"] {
	case "eval":
		v := int64(num(obj["policy_version"]))
		e := Eval{PolicyVersion: v, TrainerStep: int(v), Trajectories: r.stepTraj[v], SuccessRate: num(obj["success_rate"]),
			RewardMean: num(obj["reward_mean"]), FoundRate: num(obj["found_rate"]), Seconds: num(obj["seconds"])}
		r.evals = append(r.evals, e)
		r.evalSeconds += num(obj["eval_seconds"])
		if r.o.OnEval != nil {
			r.o.OnEval(e)
		}
	case "error":
		r.trainErr, _ = obj["message"].(string)
	case "step":
		var ts TrainerStep
		if b, err := json.Marshal(obj); err == nil && json.Unmarshal(b, &ts) == nil {
			r.trainSteps = append(r.trainSteps, ts)
		}
		r.steps = int(num(obj["trainer_step"]))
		r.stepTraj[int64(num(obj["policy_version"]))] = int(num(obj["trajectories"]))
		select {
		case r.stepCh <- r.steps:
		default:
		}
	case "published":
		r.sampling += num(obj["seconds"])
		if ids, ok := obj["trajectory_ids"].([]any); ok {
			for _, id := range ids {
				if s, ok := id.(string); ok {
					r.pubIDs[s] = true
				}
			}
		}
	case "done":
		r.done = obj
	}
}

func (r *run) trainerError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trainErr
}

func (r *run) stepsDone() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.steps
}

func (r *run) published() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.pubIDs))
	for k := range r.pubIDs {
		out[k] = true
	}
	return out
}

// bound names what limits the loop: the part with the largest busy share of
// the wall time (sampling counted per worker, scoring as the processor's
// CPU, training and evaluation as the trainer and the evaluator report
// them), followed by the other shares and how long the trainer waits.
func bound(sh map[string]float64, workers int) string {
	parts := []struct {
		name  string
		share float64
	}{ // ties go to the earlier part
		{"training", sh["training"]},
		{"scoring", sh["scoring"]},
		{"sampling", sh["sampling"] / float64(max(1, workers))},
		{"evaluation", sh["evaluation"]},
	}
	top := 0
	for i, p := range parts {
		if p.share > parts[top].share {
			top = i
		}
	}
	var others []string
	for i, p := range parts {
		if i != top {
			others = append(others, p.name+" "+pct(p.share))
		}
	}
	return fmt.Sprintf("%s (%s of the time; %s; the trainer waits for samples %s; sampling is per worker)",
		parts[top].name, pct(parts[top].share), strings.Join(others, ", "), pct(sh["waiting"]))
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	}
	return 0
}

func counts(v any) map[string]int {
	out := map[string]int{}
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			out[k] = int(num(x))
		}
	}
	return out
}

// drain waits until every published trajectory is found (by the
// trajectory id in the sample; samples are keyed by prompt id) in the
// samples or the stale topic, or until it has found nothing new for
// patience; it returns the trajectory ids found and the number of stale
// samples.
func (r *run) drain(ctx context.Context, brokers []string, published map[string]bool, patience time.Duration) (map[string]bool, int64, error) {
	found := map[string]bool{}
	next := map[string]int64{} // "topic/partition" -> next offset to read
	asm := map[string]*consumers.Assembler{}
	var stale int64
	deadline := time.Now().Add(patience)
	lastMissing := len(published) + 1
	for {
		for _, topic := range []string{r.o.Topics.Samples, r.o.Topics.SamplesStale} {
			parts, err := consumers.Partitions(ctx, brokers, kafkasec.Config{}, topic)
			if err != nil {
				return found, stale, err
			}
			for _, p := range parts {
				k := fmt.Sprintf("%s/%d", topic, p)
				if asm[k] == nil {
					asm[k] = consumers.NewAssembler(consumers.ReassemblyConfig{})
				}
				end, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, p, next[k], func(raw consumers.Record) error {
					rec, _ := asm[k].Add(raw)
					if rec == nil {
						return nil
					}
					s, err := schemas.Samples().Decode(rec.Value)
					if err != nil {
						return nil // not a sample: nothing published is found in it
					}
					found[s.TrajectoryID] = true
					if topic == r.o.Topics.SamplesStale {
						stale++
					}
					return nil
				})
				if err != nil {
					return found, stale, err
				}
				next[k] = end
			}
		}
		missing := 0
		for id := range published {
			if !found[id] {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return found, stale, nil
		}
		if missing < lastMissing { // progress: the processor is still working off a backlog
			deadline, lastMissing = time.Now().Add(patience), missing
		}
		time.Sleep(time.Second)
	}
}
