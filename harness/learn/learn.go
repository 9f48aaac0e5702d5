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
	case MethodGRPO:
		return []string{"--method", MethodLAPO, "--lambda", "0"}
	case MethodPPO:
		return []string{"--method", MethodAttnSR, "--attnsr-output", string(vocab.OutputPPO), "--beta", "0"}
	case MethodAttnSR:
		return []string{"--method", MethodAttnSR, "--attnsr-output", o.AttnSROutput, "--beta", ftoa(o.Beta)}
	}
	a := []string{"--method", MethodLAPO, "--lambda", ftoa(o.Lambda), "--direction", o.Direction}
	if o.NoGate {
		a = append(a, "--no-gate")
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
// timeout passes) and returns the summary.
func Run(ctx context.Context, o Options) (sum Summary, err error) {
	if err := o.Validate(); err != nil {
		return Summary{}, err
	}
	o = o.resolved()
	if o.Exe == "" {
		return Summary{}, errors.New("learn: the creditflow binary to run the processor from is not set")
	}
	if o.Python == "" {
		if o.Python, err = FindPython(ctx, os.Stderr); err != nil {
			return Summary{}, err
		}
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
	init := startCheckpoint(pkg, o.World)

	brokers := o.Brokers
	if len(brokers) == 0 {
		b, err := broker.Start(broker.WithDefaultPartitions(o.Partitions), broker.WithLogger(o.Logger))
		if err != nil {
			return Summary{}, err
		}
		defer b.Close()
		brokers = b.Addrs()
	}
	cfg := stage.DefaultConfig()
	cfg.Topics = o.Topics
	if err := producers.EnsureTopics(ctx, brokers, cfg.Security, cfg.TopicSpecs(o.Partitions)...); err != nil {
		return Summary{}, fmt.Errorf("learn: create topics: %w", err)
	}

	r := &run{o: o, log: o.Logger, pubIDs: map[string]bool{}, stepCh: make(chan int, 1024), stepTraj: map[int64]int{0: 0}}
	bs := strings.Join(brokers, ",")
	t := o.Topics
	procArgs := []string{o.Exe, "run", "--brokers", bs, "--stage", "both", "--group", o.GroupID,
		"--topic-trajectories", t.Trajectories, "--topic-scored", t.Scored, "--topic-samples", t.Samples,
		"--topic-dead-letters", t.DeadLetters, "--topic-state", t.State, "--topic-policy", t.Policy,
		"--topic-samples-stale", t.SamplesStale, "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10),
		"--scorers", "local", "--scorer-model", init, "--scorer-follow-policy", "--metrics-addr", "", "--log-level", "warn",
		"--session-timeout", "6s", "--commit-interval", "200ms"}
	procArgs = append(procArgs, o.processorArgs()...)
	var procCPU float64
	startProcessor := func() (*proc, error) {
		return startProc("processor", dir, nil, nil, procArgs...)
	}
	processor, err := startProcessor()
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = processor.stop(30 * time.Second) }()

	penv := pythonEnv(pkg, o.Python)
	trainer, err := startProc("trainer", dir, penv, r.onLine, o.Python, "-m", "creditflow.learn.trainer",
		"--brokers", bs, "--samples-topic", t.Samples, "--policy-topic", t.Policy, "--group", o.GroupID+"-trainer",
		"--init", init, "--out", filepath.Join(dir, "checkpoints"),
		"--steps", strconv.Itoa(o.Steps), "--groups-per-step", strconv.Itoa(o.GroupsPerStep),
		"--lr", ftoa(o.LR), "--seed", strconv.Itoa(o.Seed), "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10),
		"--loss", o.loss(), "--epochs", strconv.Itoa(o.Epochs), "--clip", ftoa(o.Clip), "--is-cap", ftoa(o.ISCap),
		"--gamma", ftoa(o.Gamma), "--gae-lambda", ftoa(o.GAELambda), "--critic-lr", ftoa(o.CriticLR))
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = trainer.stop(10 * time.Second) }()
	evaluator, err := startProc("evaluator", dir, penv, r.onLine, o.Python, "-m", "creditflow.learn.evaluate",
		"--brokers", bs, "--policy-topic", t.Policy, "--init", init, "--env", o.World,
		"--episodes", strconv.Itoa(o.EvalEpisodes), "--until-version", strconv.Itoa(o.Steps))
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = evaluator.stop(5 * time.Second) }()
	startWorker := func(k, restart int) (*proc, error) {
		return startProc(fmt.Sprintf("worker-%d", k), dir, penv, r.onLine, o.Python, "-m", "creditflow.learn.worker",
			"--brokers", bs, "--topic", t.Trajectories, "--policy-topic", t.Policy, "--init", init, "--env", o.World,
			"--run", fmt.Sprintf("s%d", o.Seed), "--worker", strconv.Itoa(k), "--workers", strconv.Itoa(o.Workers),
			"--first-group", strconv.Itoa(restart*1_000_000), "--group-size", strconv.Itoa(o.GroupSize),
			"--groups-per-version", strconv.Itoa(o.quota(k)), "--last-version", strconv.Itoa(o.Steps-1), "--seed", strconv.Itoa(o.Seed),
			"--judge-noise", strconv.FormatFloat(o.JudgeNoise, 'g', -1, 64))
	}
	workers := make([]*proc, o.Workers)
	for k := range workers {
		if workers[k], err = startWorker(k, 0); err != nil {
			return Summary{}, err
		}
	}
	stopWorkers := func() {
		for _, w := range workers {
			if w != nil {
				_ = w.stop(60 * time.Second)
			}
		}
	}
	defer stopWorkers()

	sum = Summary{Method: o.Method, World: o.World, Seed: o.Seed, Settings: settingsOf(o), Commit: sourceCommit()}
	var runErr error
wait:
	for {
		select {
		case <-trainer.done:
			break wait
		case step := <-r.stepCh:
			if !o.Chaos {
				continue
			}
			if sum.ProcessorKills == 0 && step >= max(1, o.Steps/3) {
				r.log.Warn().Int("step", step).Msg("chaos: SIGKILL of the processor")
				processor.kill()
				procCPU += processor.cpuSeconds()
				sum.ProcessorKills++
				if processor, err = startProcessor(); err != nil {
					runErr = err
					break wait
				}
			}
			if sum.WorkerKills == 0 && step >= max(2, o.Steps/2) {
				r.log.Warn().Int("step", step).Msg("chaos: SIGKILL of worker 0")
				workers[0].kill()
				sum.WorkerKills++
				if workers[0], err = startWorker(0, 1); err != nil {
					runErr = err
					break wait
				}
			}
		case <-processor.done:
			runErr = fmt.Errorf("learn: the processor stopped: %v (see %s)", processor.err, filepath.Join(dir, "processor.log"))
			break wait
		case <-ctx.Done():
			runErr = fmt.Errorf("learn: gave up after %v (trainer at step %d of %d)", o.Timeout, r.stepsDone(), o.Steps)
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				runErr = fmt.Errorf("learn: interrupted at trainer step %d of %d", r.stepsDone(), o.Steps)
			}
			break wait
		}
	}
	if runErr == nil && trainer.err != nil {
		runErr = fmt.Errorf("learn: the trainer failed: %v (see %s)", trainer.err, filepath.Join(dir, "trainer.log"))
		if msg := r.trainerError(); msg != "" {
			runErr = fmt.Errorf("learn: the trainer stopped: %s", msg)
		}
	}
	// Drain: the workers stop after their batch in flight is acknowledged;
	// the processor then works off what they published; the evaluator
	// finishes the versions announced.
	stopWorkers()
	if runErr == nil {
		select {
		case <-evaluator.done:
			if evaluator.err != nil {
				runErr = fmt.Errorf("learn: the evaluator failed: %v (see %s)", evaluator.err, filepath.Join(dir, "evaluator.log"))
			}
		case <-ctx.Done():
			runErr = fmt.Errorf("learn: gave up after %v waiting for the evaluation of the last versions", o.Timeout)
		}
	}
	sum.Seconds = time.Since(start).Seconds()
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
	_ = processor.stop(30 * time.Second)
	procCPU += processor.cpuSeconds()
	r.fill(&sum, procCPU)
	if runErr == nil && sum.Lost > 0 {
		runErr = fmt.Errorf("learn: %d trajectories published by the workers are in neither the samples nor the stale topic", sum.Lost)
	}
	if o.Dir != "" {
		r.log.Info().Str("dir", dir).Msg("run folder kept")
	}
	return sum, runErr
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
