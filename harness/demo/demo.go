// Package demo runs the whole pipeline on one machine: the embedded Kafka
// broker, CPU reference scorer servers with the built-in tiny model, both
// stages, a synthetic rollout producer and a trainer-side consumer that
// validates every sample. `creditflow demo`, the end-to-end tests and the
// load tests are built on it.
package demo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
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

// Run runs the pipeline until every expected sample is consumed (or the
// timeout passes) and returns the summary. A run that did not see every
// sample returns the summary and an error.
func Run(ctx context.Context, o Options) (Summary, error) {
	if err := o.Validate(); err != nil {
		return Summary{}, err
	}
	parent := ctx // cancelled by the caller (Ctrl-C): also ends the measuring after the run
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := o.Logger
	start := time.Now()

	brokers := o.Brokers
	if len(brokers) == 0 {
		b, err := broker.Start(broker.WithDefaultPartitions(o.Partitions), broker.WithLogger(log))
		if err != nil {
			return Summary{}, err
		}
		defer b.Close()
		brokers = b.Addrs()
	}

	// Scorer servers on loopback, speaking the real protocol.
	m := o.Model
	if m == nil {
		m = cpumodel.Tiny()
	}
	var endpoints []string
	var wg sync.WaitGroup
	// The servers stop on cancellation: cancel before waiting for them, on
	// every return (a deferred Wait alone ran before the deferred cancel).
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < max(1, o.Scorers); i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Summary{}, err
		}
		srvOpts := []server.Option{server.WithLogger(log)}
		var localOpts []local.Option
		if r, ok := o.Registerer.(*prometheus.Registry); ok {
			// The scorer servers' metrics (what a scorer pod exports) on
			// the demo's /metrics too.
			srvOpts = append(srvOpts, server.WithRegistry(r))
			localOpts = append(localOpts, local.WithRegisterer(r))
		}
		// The scorers serve the newest policy version the rollouts use (a
		// scorer that follows the trainer), so the scorer version lag is known.
		localOpts = append(localOpts, local.WithPolicyVersion(synth.NewestPolicyVersion(o.Groups)))
		srv := server.New(local.New(m, localOpts...), srvOpts...)
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(ctx, ln) }()
		endpoints = append(endpoints, "http://"+ln.Addr().String())
	}
	scorerClient, err := client.New(endpoints, client.WithLogger(log), client.WithRegisterer(o.Registerer))
	if err != nil {
		return Summary{}, err
	}
	defer scorerClient.Close()

	cfg := stage.DefaultConfig()
	trainerGroup, deadGroup := "creditflow-demo-trainer", "creditflow-demo-dead-letters"
	cfg.Topics = Topics(o.Prefix)
	if o.Prefix != "" {
		cfg.GroupID, trainerGroup, deadGroup = o.Prefix, o.Prefix+"-trainer", o.Prefix+"-dead-letters"
	}
	cfg.Brokers = brokers
	cfg.Credit = o.Credit
	cfg.Credit.Method = o.Method
	cfg.Direction = o.Direction
	if o.LAPOStatistic != "" {
		cfg.LAPOStatistic = o.LAPOStatistic
	}
	cfg.Logger = log
	cfg.Metrics = stage.NewMetrics(o.Registerer)
	if err := producers.EnsureTopics(ctx, brokers, cfg.Security, cfg.TopicSpecs(o.Partitions)...); err != nil {
		return Summary{}, err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(log), producers.WithRegisterer(o.Registerer))
	if err != nil {
		return Summary{}, err
	}
	defer prod.Close()

	scoreStage, err := stage.NewScoreStage(ctx, cfg, scorerClient, prod)
	if err != nil {
		return Summary{}, err
	}
	advStage, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		return Summary{}, err
	}
	stages := make(chan error, 2)
	go func() { stages <- scoreStage.Run(ctx) }()
	go func() { stages <- advStage.Run(ctx) }()

	// Trainer side: validate every sample, count dead letters.
	tr := newTrainer(o)
	trainerDone := make(chan error, 2)
	for _, sub := range []struct {
		group, topic string
		fn           func(consumers.Record)
	}{{trainerGroup, cfg.Topics.Samples, tr.sample}, {deadGroup, cfg.Topics.DeadLetters, tr.deadLetter}} {
		g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: sub.group, Topics: []string{sub.topic},
			Reassembly: &consumers.ReassemblyConfig{}}, // samples and dead letters larger than one message
			consumers.WithLogger(log), consumers.WithRegisterer(o.Registerer))
		if err != nil {
			return Summary{}, err
		}
		defer g.Close()
		fn := sub.fn
		go func() {
			trainerDone <- g.Run(ctx, func(ctx context.Context, c consumers.Claim, commit consumers.CommitFunc) error {
				for r := range c.Records {
					fn(r)
				}
				return nil
			})
		}()
	}

	// Rollout workers: groups produced at most MaxAhead ahead of the trainer.
	gen := synth.Default()
	gen.Seed, gen.GroupSize = o.Seed, o.GroupSize
	gen.BaseMs = o.StartMs
	if gen.BaseMs == 0 {
		gen.BaseMs = start.UnixMilli()
	}
	startMs := gen.BaseMs
	if o.Method == credit.MethodAttnSR {
		gen.Shape = synth.ALFWorld
	}
	go func() {
		bad := badRecords(gen, o.Bad)
		for g := 0; g < o.Groups; g++ {
			for tr.groupsOut() < g-o.MaxAhead {
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			var msgs []producers.Message
			for i := 0; i < gen.GroupSize; i++ {
				t, truth := gen.Generate(g, i)
				if o.StartMs == 0 { // the wall clock when it is published (Options.StartMs)
					t.CreatedAtMs = time.Now().UnixMilli()
				}
				tr.addTruth(t, truth)
				b, err := schemas.Trajectories().Encode(&t)
				if err != nil {
					log.Error().Err(err).Msg("encode trajectory")
					return
				}
				msgs = append(msgs, producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(t.PromptID), Value: b,
					Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Trajectories().Name())}}})
			}
			if len(bad) > 0 && g%3 == 1 {
				msgs = append(msgs, bad[0])
				bad = bad[1:]
			}
			for i := range msgs {
				msgs[i].Topic = cfg.Topics.Trajectories
			}
			if err := prod.Produce(ctx, msgs...); err != nil {
				if ctx.Err() == nil {
					log.Error().Err(err).Msg("produce trajectories")
				}
				return
			}
			tr.produced(synth.PromptID(g), time.Now())
		}
		for _, b := range bad { // fewer groups than bad records
			b.Topic = cfg.Topics.Trajectories
			_ = prod.Produce(ctx, b)
		}
	}()

	deadline := time.After(o.Timeout)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var runErr error
	interrupted := false
wait:
	for {
		select {
		case <-tick.C:
			if o.Progress != nil {
				o.Progress(tr.progress(time.Since(start)))
			}
			if tr.complete() {
				break wait
			}
		case err := <-stages:
			if err != nil && ctx.Err() == nil {
				runErr = fmt.Errorf("demo: a stage stopped: %w", err)
				break wait
			}
		case <-deadline:
			runErr = fmt.Errorf("demo: timed out after %v waiting for samples", o.Timeout)
			break wait
		case <-ctx.Done():
			runErr = fmt.Errorf("%w before every sample arrived", ErrInterrupted)
			interrupted = true
			break wait
		}
	}
	elapsed := time.Since(start)
	sum := tr.summary(elapsed, interrupted)
	sum.StartMs, sum.WallClock = startMs, o.StartMs == 0
	sum.ScorerRequests = scorerClient.Stats().Requests
	cancel()
	if runErr == nil {
		tr.mu.Lock()
		h := tr.hits
		tr.mu.Unlock()
		if o.Progress != nil {
			p := tr.progress(time.Since(start))
			p.Measuring = true
			o.Progress(p)
		}
		if err := h.finish(parent, &sum, o, m); parent.Err() != nil {
			sum.Interrupted = true
			runErr = fmt.Errorf("%w while measuring where credit lands (every sample had arrived)", ErrInterrupted)
		} else if err != nil {
			runErr = fmt.Errorf("demo: measuring where credit lands: %w", err)
		}
	}
	if runErr == nil && (sum.Lost != 0 || sum.Invalid != 0) {
		runErr = fmt.Errorf("demo: %d samples lost, %d invalid", sum.Lost, sum.Invalid)
	}
	return sum, runErr
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
