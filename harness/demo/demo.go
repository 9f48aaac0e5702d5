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
	"github.com/creditflow/creditflow/gpu/client"
	"github.com/creditflow/creditflow/gpu/local"
	"github.com/creditflow/creditflow/gpu/model"
	"github.com/creditflow/creditflow/gpu/server"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// Options configure a run.
type Options struct {
	Groups     int
	GroupSize  int
	Method     string // lapo | attnsr
	Credit     credit.Config
	Direction  string
	Partitions int
	Scorers    int // scorer servers behind the client
	Bad        int // malformed records injected (each must end as a dead letter)
	MaxAhead   int // groups produced ahead of the samples consumed (rollout staleness bound)
	Seed       uint64
	Timeout    time.Duration
	Logger     zerolog.Logger
	Registerer prometheus.Registerer // nil: private
	Progress   func(Progress)        // called about twice a second
	// Brokers, when set, uses an existing cluster instead of starting the embedded broker.
	Brokers []string
	// Prefix, when set, names the demo's topics <Prefix>.trajectories,
	// <Prefix>.scored, … and its consumer groups <Prefix>, <Prefix>-trainer,
	// <Prefix>-dead-letters, so a demo on a shared cluster never writes into
	// the live creditflow.* topics nor joins the live groups (default: the
	// pipeline's default names, right for the embedded broker).
	Prefix string
	// Model is the scorers' model; nil: the built-in trained model (model.Tiny).
	Model *model.Model
	// StartMs is the event time (created_at_ms, Unix ms) of the first
	// trajectory; later ones follow 10 ms apart. 0: the wall clock when the
	// run starts, so sample ages and event-time charts are real. The same
	// StartMs and Seed give the same output bytes.
	StartMs int64
}

// Defaults is the demo's default size.
func Defaults() Options {
	return Options{Groups: 24, GroupSize: 5, Method: credit.MethodLAPO, Credit: credit.DefaultConfig(),
		Direction: stage.Backward, Partitions: 4, Scorers: 2, Bad: 3, MaxAhead: 2, Seed: 7,
		Timeout: 5 * time.Minute, Logger: zerolog.Nop()}
}

// Progress is a live view of a run.
type Progress struct {
	GroupsIn, GroupsOut, SamplesOut, DeadLetters, Expected int
	Elapsed                                                time.Duration
}

// Summary is what a run measured. JSON names are stable.
type Summary struct {
	Method string `json:"method"`
	// StartMs is the first trajectory's event time: pass it as
	// Options.StartMs (--start-ms) to reproduce the run's output bytes.
	StartMs      int64          `json:"start_ms"`
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
	// arrived. Nothing is counted as lost then: Pending trajectories were
	// produced and their samples not yet consumed, NotProduced never were.
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
	LAPOHitRate     *float64 `json:"lapo_hit_rate,omitempty"`
	LAPOHitForward  *float64 `json:"lapo_hit_rate_forward,omitempty"`
	LAPOHitRandom   *float64 `json:"lapo_hit_rate_random_model,omitempty"`
	LAPOHitChance   *float64 `json:"lapo_hit_chance,omitempty"`
	LAPOHitMeasured int      `json:"lapo_hit_trajectories,omitempty"`
	// AttnSR: the share whose largest intermediate p_k is on the key step.
	AttnSRKeyHitRate  *float64 `json:"attnsr_key_step_hit_rate,omitempty"`
	AttnSRKeyChance   *float64 `json:"attnsr_key_step_chance,omitempty"`
	AttnSRKeyMeasured int      `json:"attnsr_key_step_trajectories,omitempty"`
}

// Run runs the pipeline until every expected sample is consumed (or the
// timeout passes) and returns the summary. A run that did not see every
// sample returns the summary and an error.
func Run(ctx context.Context, o Options) (Summary, error) {
	if o.Groups <= 0 || o.GroupSize <= 0 {
		return Summary{}, fmt.Errorf("demo: --groups and the group size must be positive")
	}
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
		m = model.Tiny()
	}
	var endpoints []string
	var wg sync.WaitGroup
	defer wg.Wait()
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
			runErr = ctx.Err()
			interrupted = true
			break wait
		}
	}
	elapsed := time.Since(start)
	sum := tr.summary(elapsed, interrupted)
	sum.StartMs = startMs
	sum.ScorerRequests = scorerClient.Stats().Requests
	cancel()
	if runErr == nil {
		tr.mu.Lock()
		h := tr.hits
		tr.mu.Unlock()
		if err := h.finish(context.Background(), &sum, o, m); err != nil {
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

// trainer validates and counts what a trainer would read.
type trainer struct {
	o          Options
	mu         sync.Mutex
	seen       map[string]bool
	groups     map[string]int
	groupsDone int
	dups       int
	invalid    int
	dead       map[string]int
	producedAt map[string]time.Time
	groupsIn   int
	latencies  []float64
	tokens     int64
	eligible   int
	pos, neg   int
	gatePass   int
	absProc    float64
	confSum    float64
	attnN      int
	baseline   float64
	stepPos    int
	stepNeg    int
	steps      int
	hits       *hits
	rewardSum  float64
	successes  int
}

// successThreshold is the stages' default --success-threshold.
var successThreshold = stage.DefaultConfig().SuccessThreshold

func newTrainer(o Options) *trainer {
	return &trainer{o: o, seen: map[string]bool{}, groups: map[string]int{}, dead: map[string]int{}, producedAt: map[string]time.Time{}, hits: newHits()}
}

func (t *trainer) addTruth(tr schemas.Trajectory, truth synth.Truth) {
	t.mu.Lock()
	t.hits.add(tr, truth)
	t.mu.Unlock()
}

func (t *trainer) produced(prompt string, at time.Time) {
	t.mu.Lock()
	t.producedAt[prompt] = at
	t.groupsIn++
	t.mu.Unlock()
}

func (t *trainer) groupsOut() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groupsDone
}

func (t *trainer) complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen) >= t.o.Groups*t.o.GroupSize && sumMap(t.dead) >= t.o.Bad
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (t *trainer) progress(el time.Duration) Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Progress{GroupsIn: t.groupsIn, GroupsOut: t.groupsDone, SamplesOut: len(t.seen), DeadLetters: sumMap(t.dead),
		Expected: t.o.Groups * t.o.GroupSize, Elapsed: el}
}

func (t *trainer) deadLetter(r consumers.Record) {
	reason := "unknown"
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderReason {
			reason = string(h.Value)
		}
	}
	t.mu.Lock()
	t.dead[reason]++
	t.mu.Unlock()
}

// Check validates a sample as a trainer needs it: aligned lengths, a 0/1
// loss mask, finite values, zero advantage outside policy tokens.
func Check(s *schemas.Sample) error {
	n := len(s.Tokens)
	if n == 0 || len(s.LossMask) != n {
		return fmt.Errorf("lengths: tokens %d, mask %d", n, len(s.LossMask))
	}
	switch s.Output {
	case "token_rewards": // PPO: the trainer computes advantages with its critic
		if len(s.TokenRewards) != n || len(s.Advantages) != 0 {
			return fmt.Errorf("ppo sample: token rewards %d, advantages %d for %d tokens", len(s.TokenRewards), len(s.Advantages), n)
		}
	default:
		if len(s.Advantages) != n || s.TokenRewards != nil {
			return fmt.Errorf("advantages %d for %d tokens (token rewards %d)", len(s.Advantages), n, len(s.TokenRewards))
		}
	}
	if s.RolloutLogprobs != nil && len(s.RolloutLogprobs) != n {
		return fmt.Errorf("rollout log-probs %d for %d tokens", len(s.RolloutLogprobs), n)
	}
	policy := 0
	for i := 0; i < n; i++ {
		if s.LossMask[i] > 1 {
			return fmt.Errorf("loss mask %d at %d", s.LossMask[i], i)
		}
		if len(s.Advantages) > 0 {
			a := float64(s.Advantages[i])
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return fmt.Errorf("advantage %v at %d", a, i)
			}
			if s.LossMask[i] == 0 && a != 0 {
				return fmt.Errorf("advantage %v on a non-policy token %d", a, i)
			}
		}
		if s.TokenRewards != nil {
			if r := float64(s.TokenRewards[i]); math.IsNaN(r) || math.IsInf(r, 0) || (s.LossMask[i] == 0 && r != 0) {
				return fmt.Errorf("token reward %v at %d", r, i)
			}
		}
		policy += int(s.LossMask[i])
	}
	if policy == 0 {
		return errors.New("no policy tokens")
	}
	return nil
}

func (t *trainer) sample(r consumers.Record) {
	now := time.Now()
	s, err := schemas.Samples().Decode(r.Value)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.invalid++
		t.o.Logger.Error().Err(err).Msg("trainer: undecodable sample")
		return
	}
	if err := Check(s); err != nil {
		t.invalid++
		t.seen[s.TrajectoryID] = true // seen, but unusable: reported as invalid, not lost
		t.o.Logger.Error().Err(err).Str("trajectory_id", s.TrajectoryID).Msg("trainer: invalid sample")
		return
	}
	if t.seen[s.TrajectoryID] {
		t.dups++
		return
	}
	t.seen[s.TrajectoryID] = true
	t.rewardSum += s.Reward
	if s.Reward >= successThreshold {
		t.successes++
	}
	t.hits.observe(s)
	t.tokens += int64(len(s.Tokens))
	t.groups[s.PromptID]++
	if t.groups[s.PromptID] == int(s.GroupSize) || (s.Partial && t.groups[s.PromptID] == 1) {
		t.groupsDone++
	}
	if at, ok := t.producedAt[s.PromptID]; ok {
		t.latencies = append(t.latencies, float64(now.Sub(at).Microseconds())/1000)
	}
	for _, d := range s.Turns {
		if d.Eligible && d.Delta != nil {
			t.eligible++
			if *d.Delta > 0 {
				t.pos++
			} else if *d.Delta < 0 {
				t.neg++
			}
			t.gatePass += int(d.Gate)
			t.absProc += math.Abs(d.ProcessAdvantage)
		}
		if d.StepReward != nil {
			t.steps++
			if *d.StepReward > 0 {
				t.stepPos++
			} else if *d.StepReward < 0 {
				t.stepNeg++
			}
		}
	}
	if s.AttnSR != nil {
		t.attnN++
		t.confSum += s.AttnSR.Confidence
		t.baseline += s.AttnSR.Baseline
	}
}

func share(a, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a) / float64(n)
}

func (t *trainer) summary(el time.Duration, interrupted bool) Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	expected := t.o.Groups * t.o.GroupSize
	produced := t.groupsIn * t.o.GroupSize
	s := Summary{
		Method: t.o.Method, GroupsIn: t.groupsIn, GroupsOut: t.groupsDone, Trajectories: produced,
		SamplesOut: len(t.seen), Duplicates: t.dups, DeadLetters: sumMap(t.dead), DeadByReason: t.dead, InjectedBad: t.o.Bad,
		Lost: expected - len(t.seen), Invalid: t.invalid, Seconds: round(el.Seconds(), 3),
	}
	if interrupted && s.Lost > 0 {
		// Stopped by the user: what did not arrive is not lost (it is on the
		// trajectories topic, or was never produced).
		s.Interrupted, s.Lost = true, 0
		s.Pending, s.NotProduced = max(0, produced-len(t.seen)), expected-produced
	}
	if good := len(t.seen) - t.invalid; good > 0 {
		s.RewardMean = round(t.rewardSum/float64(good), 4)
		s.SuccessRate = round(float64(t.successes)/float64(good), 4)
	}
	s.TrajPerSecond = round(float64(len(t.seen))/el.Seconds(), 2)
	s.TokensPerSec = round(float64(t.tokens)/el.Seconds(), 0)
	if len(t.latencies) > 0 {
		l := append([]float64(nil), t.latencies...)
		sort.Float64s(l)
		s.LatencyP50Ms = round(l[len(l)/2], 1)
		s.LatencyP99Ms = round(l[min(len(l)-1, len(l)*99/100)], 1)
	}
	s.EligibleTurns = t.eligible
	s.PositiveDelta = round(share(t.pos, t.eligible), 4)
	s.NegativeDelta = round(share(t.neg, t.eligible), 4)
	s.GatePassRate = round(share(t.gatePass, t.eligible), 4)
	if t.eligible > 0 {
		s.MeanAbsProcAdv = round(t.absProc/float64(t.eligible), 4)
	}
	if t.attnN > 0 {
		s.MeanConfidence = round(t.confSum/float64(t.attnN), 4)
		s.EMABaseline = round(t.baseline/float64(t.attnN), 4)
	}
	s.PositiveStep = round(share(t.stepPos, t.steps), 4)
	s.NegativeStep = round(share(t.stepNeg, t.steps), 4)
	return s
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
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
