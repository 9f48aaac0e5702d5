package learn

// The options of a run: what `creditflow learn` sets from its flags, the
// defaults, and the checks a run starts with.

import (
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/processors/stage"
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
	Python           string // "" : FindPython
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

// Validate reports options a run cannot start with, naming the flag of
// `creditflow learn` to change; it looks at the options only.
func (o Options) Validate() error {
	if o.Method != MethodLAPO && o.Method != MethodGRPO && o.Method != MethodAttnSR {
		return fmt.Errorf("--method %q: use lapo, grpo or attnsr", o.Method)
	}
	switch o.resolved().World {
	case "searchqa", "widesearch", "household":
	default:
		return fmt.Errorf("--world %q: use searchqa, widesearch or household (docs/learn.md)", o.World)
	}
	if o.Workers < 1 || o.Steps < 1 || o.GroupsPerStep < 1 || o.GroupSize < 2 {
		return fmt.Errorf("--workers, --steps and --groups-per-step must be positive and the group size at least 2")
	}
	if o.JudgeNoise < 0 || o.JudgeNoise >= 0.5 || math.IsNaN(o.JudgeNoise) {
		return fmt.Errorf("--judge-noise %v: want a probability in [0, 0.5) (at 0.5 the reward says nothing)", o.JudgeNoise)
	}
	if o.Partitions < 1 {
		return fmt.Errorf("--partitions %d: want at least 1", o.Partitions)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", o.Timeout)
	}
	return nil
}
