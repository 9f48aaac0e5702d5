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
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
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
)

// Methods: GRPO is outcome advantages only (LAPO's advantage with λ = 0).
const (
	MethodLAPO   = "lapo"
	MethodGRPO   = "grpo"
	MethodAttnSR = "attnsr"
)

// Options configure one run of the loop.
type Options struct {
	Method        string // lapo | grpo | attnsr
	World         string // searchqa | widesearch | household ("" : household for attnsr, searchqa otherwise)
	Seed          int
	Workers       int
	Steps         int // trainer steps (policy versions after the start)
	GroupsPerStep int
	GroupSize     int
	// GroupsPerVersion bounds what a worker produces under one version
	// before it waits for the next (0: GroupsPerStep/Workers + 1).
	GroupsPerVersion int
	MaxPolicyLag     int64
	LR               float64
	EvalEpisodes     int
	Partitions       int
	Brokers          []string // empty: the embedded broker
	Topics           stage.Topics
	GroupID          string // the processor's consumer group prefix
	Dir              string // run folder (checkpoints, logs); "" : a temporary one, removed after
	Exe              string // the creditflow binary the processor runs from
	Python           string // "" : FindPython ($CREDITFLOW_PYTHON, else the project's environment)
	Chaos            bool   // SIGKILL the processor and one worker mid-run
	// JudgeNoise is the probability that the outcome reward the workers
	// publish is wrong (a flaky judge; held-out success counts true answers).
	JudgeNoise float64
	Timeout    time.Duration
	Logger     zerolog.Logger
	// OnEval, when set, sees each version's evaluation as it arrives.
	OnEval func(Eval)
}

// Defaults is a run that shows a clear rise on two cores in minutes.
func Defaults() Options {
	return Options{Method: MethodLAPO, Seed: 1, Workers: 2, Steps: 16, GroupsPerStep: 8, GroupSize: 5,
		MaxPolicyLag: 1, LR: 2e-4, EvalEpisodes: 128, Partitions: 2, Topics: stage.DefaultTopics(),
		GroupID: "creditflow-learn", Timeout: 20 * time.Minute, Logger: zerolog.Nop()}
}

// resolved is o with the defaults that depend on other options filled in:
// the method's world, and the groups a worker plays under one version.
func (o Options) resolved() Options {
	if o.World == "" {
		o.World = "searchqa"
		if o.Method == MethodAttnSR {
			o.World = "household"
		}
	}
	if o.GroupsPerVersion <= 0 && o.Workers > 0 {
		o.GroupsPerVersion = (o.GroupsPerStep+o.Workers-1)/o.Workers + 1
	}
	return o
}

// Eval is the held-out evaluation of one policy version.
type Eval struct {
	PolicyVersion int64   `json:"policy_version"`
	TrainerStep   int     `json:"trainer_step"`
	Trajectories  int     `json:"trajectories"` // consumed by the trainer before this version
	SuccessRate   float64 `json:"success_rate"`
	RewardMean    float64 `json:"reward_mean"`
	FoundRate     float64 `json:"found_rate"` // episodes in which a turn revealed the evidence
	Seconds       float64 `json:"seconds"`    // since the trainer started
}

// Summary is what a run measured. JSON names are stable.
type Summary struct {
	Method                       string             `json:"method"`
	World                        string             `json:"world"`
	Seed                         int                `json:"seed"`
	Seconds                      float64            `json:"seconds"`
	PolicyVersions               int64              `json:"policy_versions"` // versions announced after the start
	TrainerSteps                 int                `json:"trainer_steps"`
	InitialSuccess               float64            `json:"initial_success"`
	FinalSuccess                 float64            `json:"final_success"`
	Eval                         []Eval             `json:"eval"`
	Trajectories                 int                `json:"trajectories"` // published by the workers
	TrainerTrajectories          int                `json:"trainer_trajectories"`
	SamplesByPolicyVersion       map[string]int     `json:"samples_by_policy_version"`
	SamplesByScorerPolicyVersion map[string]int     `json:"samples_by_scorer_policy_version"`
	StaleSamples                 int64              `json:"stale_samples"`            // routed to the stale topic by the processor
	StaleSkipped                 int                `json:"stale_skipped_by_trainer"` // went stale while waiting in the samples topic
	Lost                         int                `json:"lost"`
	DuplicatesDropped            int                `json:"duplicates_dropped"`
	ReloadSecondsP50             *float64           `json:"reload_seconds_p50"`
	ReloadSeconds                []float64          `json:"reload_seconds"`
	TrainerWaitShare             float64            `json:"trainer_wait_share"`
	Shares                       map[string]float64 `json:"time_shares"` // sampling, scoring, training, evaluation, waiting
	Bound                        string             `json:"bound"`
	ProcessorKills               int                `json:"processor_kills"`
	WorkerKills                  int                `json:"worker_kills"`
	// Settings are the options that decide what the run learns (absent in
	// summaries written before they were recorded).
	Settings *Settings `json:"settings,omitempty"`
}

// Settings are the options of a run that change its learning curve; two
// runs of one method and seed with equal settings measure the same thing.
type Settings struct {
	Steps            int     `json:"steps"`
	GroupsPerStep    int     `json:"groups_per_step"`
	GroupSize        int     `json:"group_size"`
	Workers          int     `json:"workers"`
	GroupsPerVersion int     `json:"groups_per_version"`
	MaxPolicyLag     int64   `json:"max_policy_lag"`
	LR               float64 `json:"lr"`
	EvalEpisodes     int     `json:"eval_episodes"`
	Chaos            bool    `json:"chaos,omitempty"`
	JudgeNoise       float64 `json:"judge_noise,omitempty"`
}

// settingsOf is what o records in a summary (o with its defaults resolved).
func settingsOf(o Options) *Settings {
	return &Settings{Steps: o.Steps, GroupsPerStep: o.GroupsPerStep, GroupSize: o.GroupSize, Workers: o.Workers,
		GroupsPerVersion: o.GroupsPerVersion, MaxPolicyLag: o.MaxPolicyLag, LR: o.LR, EvalEpisodes: o.EvalEpisodes, Chaos: o.Chaos,
		JudgeNoise: o.JudgeNoise}
}

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
	stepCh      chan int
}

// Run runs the loop until the trainer has taken o.Steps steps (or the
// timeout passes) and returns the summary.
func Run(ctx context.Context, o Options) (Summary, error) {
	if o.Method != MethodLAPO && o.Method != MethodGRPO && o.Method != MethodAttnSR {
		return Summary{}, fmt.Errorf("learn: --method %q: use lapo, grpo or attnsr", o.Method)
	}
	o = o.resolved()
	switch o.World {
	case "searchqa", "widesearch", "household":
	default:
		return Summary{}, fmt.Errorf("learn: --world %q: use searchqa, widesearch or household (docs/learn.md)", o.World)
	}
	if o.Workers < 1 || o.Steps < 1 || o.GroupsPerStep < 1 || o.GroupSize < 2 {
		return Summary{}, fmt.Errorf("learn: --workers, --steps and --groups-per-step must be positive and the group size at least 2")
	}
	if o.JudgeNoise < 0 || o.JudgeNoise >= 0.5 || math.IsNaN(o.JudgeNoise) {
		return Summary{}, fmt.Errorf("learn: --judge-noise %v: want a probability in [0, 0.5) (at 0.5 the reward says nothing)", o.JudgeNoise)
	}
	if o.Exe == "" {
		return Summary{}, errors.New("learn: the creditflow binary to run the processor from is not set")
	}
	var err error
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
		defer os.RemoveAll(dir)
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
	method := o.Method
	procArgs := []string{o.Exe, "run", "--brokers", bs, "--stage", "both", "--group", o.GroupID,
		"--topic-trajectories", t.Trajectories, "--topic-scored", t.Scored, "--topic-samples", t.Samples,
		"--topic-dead-letters", t.DeadLetters, "--topic-state", t.State, "--topic-policy", t.Policy,
		"--topic-samples-stale", t.SamplesStale, "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10),
		"--scorer-model", init, "--scorer-follow-policy", "--metrics-addr", "", "--log-level", "warn",
		"--session-timeout", "6s", "--commit-interval", "200ms"}
	if method == MethodGRPO {
		procArgs = append(procArgs, "--method", MethodLAPO, "--lambda", "0")
	} else {
		procArgs = append(procArgs, "--method", method)
	}
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
		"--lr", strconv.FormatFloat(o.LR, 'g', -1, 64), "--seed", strconv.Itoa(o.Seed), "--max-policy-lag", strconv.FormatInt(o.MaxPolicyLag, 10))
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
			"--groups-per-version", strconv.Itoa(o.GroupsPerVersion), "--seed", strconv.Itoa(o.Seed),
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

	sum := Summary{Method: o.Method, World: o.World, Seed: o.Seed, Settings: settingsOf(o)}
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
	case "step":
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

// fill completes the summary from the evaluations and the trainer's last line.
func (r *run) fill(s *Summary, procCPU float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Eval = append([]Eval(nil), r.evals...)
	sort.SliceStable(s.Eval, func(i, j int) bool { return s.Eval[i].PolicyVersion < s.Eval[j].PolicyVersion })
	for i := range s.Eval { // an evaluation can be read before the trainer's step line
		s.Eval[i].Trajectories = r.stepTraj[s.Eval[i].PolicyVersion]
	}
	if len(s.Eval) > 0 {
		s.InitialSuccess = s.Eval[0].SuccessRate
		s.FinalSuccess = s.Eval[len(s.Eval)-1].SuccessRate
	}
	d := r.done
	if d == nil {
		d = map[string]any{}
	}
	s.PolicyVersions = int64(num(d["policy_versions"]))
	s.TrainerSteps = int(num(d["trainer_steps"]))
	s.TrainerTrajectories = int(num(d["trajectories"]))
	s.DuplicatesDropped = int(num(d["duplicates_dropped"]))
	s.StaleSkipped = int(num(d["stale_skipped"]))
	s.TrainerWaitShare = num(d["trainer_wait_share"])
	s.SamplesByPolicyVersion = counts(d["samples_by_policy_version"])
	s.SamplesByScorerPolicyVersion = counts(d["samples_by_scorer_policy_version"])
	if v, ok := d["reload_seconds_p50"].(float64); ok {
		s.ReloadSecondsP50 = &v
	}
	if xs, ok := d["reload_seconds"].([]any); ok {
		for _, x := range xs {
			s.ReloadSeconds = append(s.ReloadSeconds, num(x))
		}
	}
	wall := s.Seconds
	if wall <= 0 {
		return
	}
	// Busy shares of the loop's wall time: sampling is summed over the
	// workers (so it can pass 1 with several), scoring is the processor's CPU.
	s.Shares = map[string]float64{
		"sampling":   round3(r.sampling / wall),
		"scoring":    round3(procCPU / wall),
		"training":   round3(num(d["train_seconds"]) / wall),
		"evaluation": round3(r.evalSeconds / wall),
		"waiting":    round3(s.TrainerWaitShare),
	}
	s.Bound = bound(s.Shares, r.o.Workers)
}

// bound names what limits the loop: the trainer waits for samples most of
// the time when the producers (workers, processor) are the bottleneck.
func bound(sh map[string]float64, workers int) string {
	if sh["waiting"] < 0.5 {
		return "training (the trainer waits for samples " + pct(sh["waiting"]) + " of the time)"
	}
	sampling := sh["sampling"] / float64(max(1, workers))
	if sampling >= sh["scoring"] {
		return fmt.Sprintf("sampling (each worker plays episodes %s of the time; the processor's CPU is %s; the trainer waits %s)",
			pct(sampling), pct(sh["scoring"]), pct(sh["waiting"]))
	}
	return fmt.Sprintf("scoring (the processor's CPU is %s of the time; each worker samples %s; the trainer waits %s)",
		pct(sh["scoring"]), pct(sampling), pct(sh["waiting"]))
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

// drain waits until every published trajectory is found (by key) in the
// samples or the stale topic, or until it has found nothing new for
// patience; it returns the trajectory ids found and the number of stale
// samples.
func (r *run) drain(ctx context.Context, brokers []string, published map[string]bool, patience time.Duration) (map[string]bool, int64, error) {
	found := map[string]bool{}
	next := map[string]int64{} // "topic/partition" -> next offset to read
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
				end, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, p, next[k], func(rec consumers.Record) error {
					found[string(rec.Key)] = true
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
