// Package demo runs the whole pipeline on one machine: the embedded Kafka
// broker, CPU reference scorer servers with the built-in tiny model, both
// stages, a synthetic rollout producer and a trainer-side consumer that
// validates every sample. `creditflow demo`, the end-to-end tests and the
// load tests are built on it.
package demo

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/vocab"
)

// Options configure a run.
type Options struct {
	Groups    int
	GroupSize int
	Method    vocab.Method // a registered credit method: lapo or attnsr
	Credit    credit.Config
	Direction vocab.Direction
	// LAPOStatistic is what LAPO rows are scored with (docs/method.md
	// §2.4): logprob (the default), entropy or kl.
	LAPOStatistic vocab.Statistic
	Partitions    int
	Scorers       int // scorer servers behind the client
	Bad           int // malformed records injected (each must end as a dead letter)
	MaxAhead      int // groups produced ahead of the samples consumed (rollout staleness bound)
	Seed          uint64
	Timeout       time.Duration
	Logger        zerolog.Logger
	Registerer    prometheus.Registerer // nil: private
	Progress      func(Progress)        // called about twice a second
	// Brokers, when set, uses an existing cluster instead of starting the embedded broker.
	Brokers []string
	// Prefix, when set, names the demo's topics <Prefix>.trajectories,
	// <Prefix>.scored, … and its consumer groups <Prefix>, <Prefix>-trainer,
	// <Prefix>-dead-letters, so a demo on a shared cluster never writes into
	// the live creditflow.* topics nor joins the live groups (default: the
	// pipeline's default names, right for the embedded broker).
	Prefix string
	// Model is the scorers' model; nil: the built-in trained model (cpumodel.Tiny).
	Model *cpumodel.Model
	// StartMs, when set, is the event time (created_at_ms, Unix ms) of the
	// first trajectory; later ones follow 10 ms apart, so the same StartMs
	// and Seed give the same output bytes. 0: each trajectory carries the
	// wall clock when it is published, so sample ages and event-time charts
	// are real (and the output bytes differ from run to run).
	StartMs int64
}

// Validate reports options a run cannot work with, naming the flag of
// `creditflow demo` to change; it looks at the options only, so a command
// can refuse them before it starts anything.
func (o Options) Validate() error {
	switch {
	case o.Groups < 1:
		return fmt.Errorf("--groups %d: want at least 1", o.Groups)
	case o.GroupSize < 1:
		return fmt.Errorf("--group-size %d: want at least 1", o.GroupSize)
	case o.Partitions < 1:
		return fmt.Errorf("--partitions %d: want at least 1", o.Partitions)
	case o.Scorers < 1:
		return fmt.Errorf("--scorers %d: want at least 1", o.Scorers)
	case o.Bad < 0:
		return fmt.Errorf("--bad %d: want 0 or more", o.Bad)
	case o.MaxAhead < 0:
		return fmt.Errorf("--max-ahead %d: want 0 or more", o.MaxAhead)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration", o.Timeout)
	case o.Method != credit.MethodLAPO && o.Method != credit.MethodAttnSR:
		return fmt.Errorf("--method %q: use %s or %s", o.Method, credit.MethodLAPO, credit.MethodAttnSR)
	case o.Direction != stage.Backward && o.Direction != stage.Forward:
		return fmt.Errorf("--direction %q: use %s or %s", o.Direction, stage.Backward, stage.Forward)
	}
	if o.LAPOStatistic != "" {
		if err := credit.CheckStatistic(o.LAPOStatistic); err != nil {
			return fmt.Errorf("--lapo-statistic: %w", err)
		}
	}
	c := o.Credit
	c.Method = o.Method
	return c.Validate()
}

// Defaults is the demo's default size.
func Defaults() Options {
	return Options{Groups: 24, GroupSize: 5, Method: credit.MethodLAPO, Credit: credit.DefaultConfig(),
		Direction: stage.Backward, LAPOStatistic: credit.StatLogProb, Partitions: 4, Scorers: 2, Bad: 3, MaxAhead: 2, Seed: 7,
		Timeout: 5 * time.Minute, Logger: zerolog.Nop()}
}

// Progress is a live view of a run.
type Progress struct {
	GroupsIn, GroupsOut, SamplesOut, DeadLetters, Expected int
	Elapsed                                                time.Duration
	// Measuring: every sample has arrived and the run now measures where
	// credit lands (the offline passes of Summary.LAPOHitForward and
	// LAPOHitRandom; seconds on a CPU). Sent once.
	Measuring bool
}

// ErrInterrupted is the error of a run whose context was cancelled (Ctrl-C)
// before it finished; the summary then holds what the run got to.
var ErrInterrupted = errors.New("interrupted")

// Summary is what a run measured. JSON names are stable.
type Summary struct {
	Method vocab.Method `json:"method"`
	// StartMs is the first trajectory's event time. WallClock: the event
	// times were the wall clock at publish time (no Options.StartMs); else
	// they were StartMs + i × 10 ms, and the same StartMs (--start-ms)
	// reproduces the run's output bytes.
	StartMs      int64          `json:"start_ms"`
	WallClock    bool           `json:"wall_clock_event_time"`
	GroupsIn     int            `json:"groups_in"`
	GroupsOut    int            `json:"groups_out"`
	Trajectories int            `json:"trajectories"`
	SamplesOut   int            `json:"samples_out"`
	Duplicates   int            `json:"duplicate_samples"`
	DeadLetters  int            `json:"dead_letters"`
	DeadByReason map[string]int `json:"dead_letters_by_reason"`
	InjectedBad  int            `json:"injected_bad"` // malformed records injected on purpose (Options.Bad)
	Lost         int            `json:"lost"`
	// Interrupted: the run was stopped (Ctrl-C) before every sample
	// arrived, or while it measured where credit lands (then the forward and
	// random-model rates are left out). Nothing is counted as lost: Pending
	// trajectories were produced and their samples not yet consumed,
	// NotProduced never were.
	Interrupted bool `json:"interrupted,omitempty"`
	Pending     int  `json:"pending,omitempty"`
	NotProduced int  `json:"not_produced,omitempty"`
	Invalid     int  `json:"invalid_samples"`
	// RewardMean is the mean outcome reward of the samples consumed;
	// SuccessRate the share with a reward of at least SuccessThreshold (1.0:
	// an exact match for F1 rewards), as creditflow_successes_total counts.
	RewardMean    float64 `json:"reward_mean"`
	SuccessRate   float64 `json:"success_rate"`
	Seconds       float64 `json:"seconds"`
	TrajPerSecond float64 `json:"trajectories_per_second"`
	TokensPerSec  float64 `json:"sample_tokens_per_second"`
	LatencyP50Ms  float64 `json:"latency_p50_ms"`
	LatencyP99Ms  float64 `json:"latency_p99_ms"`
	// LAPO
	EligibleTurns  int     `json:"eligible_turns,omitempty"`
	PositiveDelta  float64 `json:"positive_delta_share,omitempty"`
	NegativeDelta  float64 `json:"negative_delta_share,omitempty"`
	GatePassRate   float64 `json:"gate_pass_rate,omitempty"`
	MeanAbsProcAdv float64 `json:"mean_abs_process_advantage,omitempty"`
	// AttnSR
	MeanConfidence float64 `json:"mean_confidence,omitempty"`
	EMABaseline    float64 `json:"ema_baseline,omitempty"`
	PositiveStep   float64 `json:"positive_step_reward_share,omitempty"`
	NegativeStep   float64 `json:"negative_step_reward_share,omitempty"`
	ScorerRequests int64   `json:"scorer_requests"`
	// Where credit lands (docs/method.md, "Where credit lands"). LAPO: among
	// trajectories with an informative turn and at least two eligible turns,
	// the share whose largest Δ is on the informative turn, from the samples
	// consumed; the forward-direction and random-weight-model rates score the
	// same trajectories in-process after the run. Chance: a uniform pick.
	// LAPOStatistic is what the run's Δ measured (lapo only).
	LAPOStatistic   vocab.Statistic `json:"lapo_statistic,omitempty"`
	LAPOHitRate     *float64        `json:"lapo_hit_rate,omitempty"`
	LAPOHitForward  *float64        `json:"lapo_hit_rate_forward,omitempty"`
	LAPOHitRandom   *float64        `json:"lapo_hit_rate_random_model,omitempty"`
	LAPOHitChance   *float64        `json:"lapo_hit_chance,omitempty"`
	LAPOHitMeasured int             `json:"lapo_hit_trajectories,omitempty"`
	// AttnSR: the share whose largest intermediate p_k is on the key step.
	AttnSRKeyHitRate  *float64 `json:"attnsr_key_step_hit_rate,omitempty"`
	AttnSRKeyChance   *float64 `json:"attnsr_key_step_chance,omitempty"`
	AttnSRKeyMeasured int      `json:"attnsr_key_step_trajectories,omitempty"`
}

// badRecords are malformed trajectories that must each end as a dead letter.
func badRecords(gen synth.Config, n int) []producers.Message {
	base := gen.Trajectory(1_000_000, 0)
	var out []producers.Message
	mk := func(key string, v []byte) { out = append(out, producers.Message{Key: []byte(key), Value: v}) }
	for i := 0; len(out) < n; i++ {
		t := base
		t.TrajectoryID = fmt.Sprintf("bad-%d", i)
		switch i % 3 {
		case 0: // truncated bytes
			b, _ := schemas.Trajectories().Encode(&t)
			mk(t.PromptID, b[:len(b)/2])
		case 1: // a token id outside the vocabulary
			t.Turns = append([]schemas.Turn(nil), t.Turns...)
			t.Turns[0].Action = append([]int32{1 << 20}, t.Turns[0].Action...)
			t.RolloutLogprobs = append([]float32{-1}, t.RolloutLogprobs...)
			b, _ := schemas.Trajectories().Encode(&t)
			mk(t.PromptID, b)
		case 2: // a non-finite reward
			nan := math.NaN()
			t.Reward = &nan
			b, _ := schemas.Trajectories().Encode(&t)
			mk(t.PromptID, b)
		}
	}
	return out
}

// FormatCounts writes counts by name as "a 1, b 2" in name order, for
// summaries people read ("" when empty).
func FormatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Topics returns the demo's topic names for a prefix (Options.Prefix): the
// standard creditflow.* names when prefix is empty.
func Topics(prefix string) stage.Topics {
	if prefix == "" {
		return stage.DefaultTopics()
	}
	return stage.Topics{Trajectories: prefix + ".trajectories", Scored: prefix + ".scored",
		Samples: prefix + ".samples", DeadLetters: prefix + ".dead-letters", State: prefix + ".advantage-state",
		SamplesStale: prefix + ".samples.stale", Policy: prefix + ".policy"}
}
