package demo

// Run's steps: the broker, the scorer servers and their client, the
// stages' configuration and producer, the stages, the trainer side, the
// rollout workers, the wait for every sample, and the summary.

import (
	"context"
	"fmt"
	"net"
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
)

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
	r := &run{o: o, log: o.Logger, ctx: ctx, cancel: cancel, start: time.Now(), tr: newTrainer(o)}
	defer r.close()
	for _, step := range []func() error{r.startBroker, r.startScorers, r.configure, r.startStages, r.startTrainer} {
		if err := step(); err != nil {
			return Summary{}, err
		}
	}
	go r.rollouts(r.generator())
	runErr, interrupted := r.wait()
	return r.summarise(parent, runErr, interrupted)
}

// run is one demo run: what its steps start and what the later steps use.
type run struct {
	o       Options
	log     zerolog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time
	closers []func() // undone in reverse order when Run returns

	brokers []string
	model   *cpumodel.Model
	scorers *client.Client
	cfg     stage.Config
	prod    *producers.Producer
	stages  chan error // the stages' Run results
	tr      *trainer
	startMs int64 // the first trajectory's event time
}

func (r *run) onClose(f func()) { r.closers = append(r.closers, f) }

func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// startBroker starts the embedded broker unless Options.Brokers names a
// cluster.
func (r *run) startBroker() error {
	r.brokers = r.o.Brokers
	if len(r.brokers) > 0 {
		return nil
	}
	b, err := broker.Start(broker.WithDefaultPartitions(r.o.Partitions), broker.WithLogger(r.log))
	if err != nil {
		return err
	}
	r.onClose(func() { b.Close() })
	r.brokers = b.Addrs()
	return nil
}

// startScorers starts the scorer servers on loopback, speaking the real
// protocol, and the client that balances over them.
func (r *run) startScorers() error {
	r.model = r.o.Model
	if r.model == nil {
		r.model = cpumodel.Tiny()
	}
	var endpoints []string
	var wg sync.WaitGroup
	// The servers stop on cancellation: cancel before waiting for them, on
	// every return (a deferred Wait alone ran before the deferred cancel).
	r.onClose(func() { r.cancel(); wg.Wait() })
	for i := 0; i < max(1, r.o.Scorers); i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srvOpts := []server.Option{server.WithLogger(r.log)}
		var localOpts []local.Option
		if reg, ok := r.o.Registerer.(*prometheus.Registry); ok {
			// The scorer servers' metrics (what a scorer pod exports) on
			// the demo's /metrics too.
			srvOpts = append(srvOpts, server.WithRegistry(reg))
			localOpts = append(localOpts, local.WithRegisterer(reg))
		}
		// The scorers serve the newest policy version the rollouts use (a
		// scorer that follows the trainer), so the scorer version lag is known.
		localOpts = append(localOpts, local.WithPolicyVersion(synth.NewestPolicyVersion(r.o.Groups)))
		srv := server.New(local.New(r.model, localOpts...), srvOpts...)
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(r.ctx, ln) }()
		endpoints = append(endpoints, "http://"+ln.Addr().String())
	}
	c, err := client.New(endpoints, client.WithLogger(r.log), client.WithRegisterer(r.o.Registerer))
	if err != nil {
		return err
	}
	r.onClose(func() { c.Close() })
	r.scorers = c
	return nil
}

// configure makes the stages' configuration from the options, the topics
// and the producer every writer of the run shares.
func (r *run) configure() error {
	o := r.o
	cfg := stage.DefaultConfig()
	cfg.Topics = Topics(o.Prefix)
	if o.Prefix != "" {
		cfg.GroupID = o.Prefix
	}
	cfg.Brokers = r.brokers
	cfg.Credit = o.Credit
	cfg.Credit.Method = o.Method
	cfg.Direction = o.Direction
	if o.LAPOStatistic != "" {
		cfg.LAPOStatistic = o.LAPOStatistic
	}
	cfg.Logger = r.log
	cfg.Metrics = stage.NewMetrics(o.Registerer)
	r.cfg = cfg
	if err := producers.EnsureTopics(r.ctx, r.brokers, cfg.Security, cfg.TopicSpecs(o.Partitions)...); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(r.log), producers.WithRegisterer(o.Registerer))
	if err != nil {
		return err
	}
	r.onClose(func() { prod.Close() })
	r.prod = prod
	return nil
}

// startStages starts the score and the advantage stage.
func (r *run) startStages() error {
	scoreStage, err := stage.NewScoreStage(r.ctx, r.cfg, r.scorers, r.prod)
	if err != nil {
		return err
	}
	advStage, err := stage.NewAdvantageStage(r.cfg, r.prod)
	if err != nil {
		return err
	}
	r.stages = make(chan error, 2)
	go func() { r.stages <- scoreStage.Run(r.ctx) }()
	go func() { r.stages <- advStage.Run(r.ctx) }()
	return nil
}

// startTrainer starts the trainer side: consumer groups that validate every
// sample and count the dead letters.
func (r *run) startTrainer() error {
	trainerGroup, deadGroup := "creditflow-demo-trainer", "creditflow-demo-dead-letters"
	if r.o.Prefix != "" {
		trainerGroup, deadGroup = r.o.Prefix+"-trainer", r.o.Prefix+"-dead-letters"
	}
	for _, sub := range []struct {
		group, topic string
		fn           func(consumers.Record)
	}{{trainerGroup, r.cfg.Topics.Samples, r.tr.sample}, {deadGroup, r.cfg.Topics.DeadLetters, r.tr.deadLetter}} {
		g, err := consumers.NewGroup(consumers.Config{Brokers: r.brokers, GroupID: sub.group, Topics: []string{sub.topic},
			Reassembly: &consumers.ReassemblyConfig{}}, // samples and dead letters larger than one message
			consumers.WithLogger(r.log), consumers.WithRegisterer(r.o.Registerer))
		if err != nil {
			return err
		}
		r.onClose(func() { g.Close() })
		fn := sub.fn
		go func() {
			_ = g.Run(r.ctx, func(ctx context.Context, c consumers.Claim, commit consumers.CommitFunc) error {
				for rec := range c.Records {
					fn(rec)
				}
				return nil
			})
		}()
	}
	return nil
}

// generator is the rollout workers' synthetic worlds, with the options'
// seed, group size and event times.
func (r *run) generator() synth.Config {
	gen := synth.Default()
	gen.Seed, gen.GroupSize = r.o.Seed, r.o.GroupSize
	gen.BaseMs = r.o.StartMs
	if gen.BaseMs == 0 {
		gen.BaseMs = r.start.UnixMilli()
	}
	r.startMs = gen.BaseMs
	if r.o.Method == credit.MethodAttnSR {
		gen.Shape = synth.ALFWorld
	}
	return gen
}

// rollouts are the rollout workers: groups produced at most MaxAhead ahead
// of the trainer, with the malformed records of Options.Bad among them.
func (r *run) rollouts(gen synth.Config) {
	o, topic := r.o, r.cfg.Topics.Trajectories
	bad := badRecords(gen, o.Bad)
	for g := 0; g < o.Groups; g++ {
		for r.tr.groupsOut() < g-o.MaxAhead {
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		msgs, err := r.group(gen, g)
		if err != nil {
			r.log.Error().Err(err).Msg("encode trajectory")
			return
		}
		if len(bad) > 0 && g%3 == 1 {
			msgs = append(msgs, bad[0])
			bad = bad[1:]
		}
		for i := range msgs {
			msgs[i].Topic = topic
		}
		if err := r.prod.Produce(r.ctx, msgs...); err != nil {
			if r.ctx.Err() == nil {
				r.log.Error().Err(err).Msg("produce trajectories")
			}
			return
		}
		r.tr.produced(synth.PromptID(g), time.Now())
	}
	for _, b := range bad { // fewer groups than bad records
		b.Topic = topic
		_ = r.prod.Produce(r.ctx, b)
	}
}

// group is group g's trajectories as messages; the trainer side learns
// their ground truth.
func (r *run) group(gen synth.Config, g int) ([]producers.Message, error) {
	var msgs []producers.Message
	for i := 0; i < gen.GroupSize; i++ {
		t, truth := gen.Generate(g, i)
		if r.o.StartMs == 0 { // the wall clock when it is published (Options.StartMs)
			t.CreatedAtMs = time.Now().UnixMilli()
		}
		r.tr.addTruth(t, truth)
		b, err := schemas.Trajectories().Encode(&t)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, producers.Message{Topic: r.cfg.Topics.Trajectories, Key: []byte(t.PromptID), Value: b,
			Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Trajectories().Name())}}})
	}
	return msgs, nil
}

// wait waits until every expected sample arrived, a stage stopped, the
// timeout passed or the run was cancelled, reporting progress meanwhile.
func (r *run) wait() (runErr error, interrupted bool) {
	deadline := time.After(r.o.Timeout)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if r.o.Progress != nil {
				r.o.Progress(r.tr.progress(time.Since(r.start)))
			}
			if r.tr.complete() {
				return nil, false
			}
		case err := <-r.stages:
			if err != nil && r.ctx.Err() == nil {
				return fmt.Errorf("demo: a stage stopped: %w", err), false
			}
		case <-deadline:
			return fmt.Errorf("demo: timed out after %v waiting for samples", r.o.Timeout), false
		case <-r.ctx.Done():
			return fmt.Errorf("%w before every sample arrived", ErrInterrupted), true
		}
	}
}

// summarise stops the pipeline and makes the summary; after a complete run
// it measures where credit lands (until parent is cancelled).
func (r *run) summarise(parent context.Context, runErr error, interrupted bool) (Summary, error) {
	sum := r.tr.summary(time.Since(r.start), interrupted)
	sum.StartMs, sum.WallClock = r.startMs, r.o.StartMs == 0
	sum.ScorerRequests = r.scorers.Stats().Requests
	r.cancel()
	if runErr == nil {
		r.tr.mu.Lock()
		h := r.tr.hits
		r.tr.mu.Unlock()
		if r.o.Progress != nil {
			p := r.tr.progress(time.Since(r.start))
			p.Measuring = true
			r.o.Progress(p)
		}
		if err := h.finish(parent, &sum, r.o, r.model); parent.Err() != nil {
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
