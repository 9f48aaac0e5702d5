package main

// `creditflow run` from its checked runConfig (run.go): wiring, waiting
// for brokers, topics and scorers, running the stages, and shutdown.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/gcpolicy"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/health"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/policyfollow"
)

// run runs the stages of rc until ctx ends (SIGTERM) or a stage fails, then
// drains them for at most --shutdown-timeout.
func (rc *runConfig) run(ctx context.Context) error {
	cfg, log := rc.stage, rc.stage.Logger
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	cfg.Metrics = stage.NewMetrics(reg)
	start := log.Info().Strs("brokers", cfg.Brokers).Str("security", cfg.Security.String()).Str("stage", rc.stageName).
		Str("method", string(cfg.Credit.Method))
	if gc, ok := gcpolicy.Applied(); ok { // main applied it; a test calling run directly did not
		start = start.Stringer("gc", gc)
	}
	start.Msg("creditflow run starting")

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	hc := health.New(cfg.CommitInterval, rc.livenessStall)
	var scoreCheck, advCheck *health.Stage
	if rc.score {
		scoreCheck = hc.Stage("score", "waiting for the brokers and topics", true)
	}
	if rc.advantage {
		advCheck = hc.Stage("advantage", "waiting for the brokers and topics", false)
	}
	if rc.metricsAddr != "" {
		stopMetrics, err := health.Serve(rc.metricsAddr, reg, log, hc.Routes())
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if err := rc.waitForKafka(ctx, cfg, hc); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(log), producers.WithRegisterer(reg))
	if err != nil {
		return err
	}
	defer prod.Close()
	if rc.lagInterval > 0 {
		lag, err := consumers.NewLagExporter(cfg.Brokers, cfg.Security, rc.lagInterval, reg, log)
		if err != nil {
			return err
		}
		if rc.score {
			lag.Watch(cfg.ScoreGroup())
		}
		if rc.advantage {
			lag.Watch(cfg.AdvantageGroup())
		}
		go lag.Run(ctx)
	}

	errc := make(chan error, 2)
	n := 0
	if rc.score {
		src, closeScorer, err := rc.newScorer(ctx, cfg, reg)
		if err != nil {
			return err
		}
		defer closeScorer()
		n++
		go func() { errc <- runScoreStage(ctx, cfg, src, prod, scoreCheck, log) }()
	}
	if rc.advantage {
		a, err := stage.NewAdvantageStage(cfg, prod)
		if err != nil {
			return err
		}
		advCheck.Start(a)
		n++
		go func() { errc <- a.Run(ctx) }()
	}
	var first error
	select {
	case first = <-errc:
		n--
		stop()
	case <-ctx.Done():
	}
	return rc.drain(errc, n, first, log)
}

// waitForKafka waits at most --startup-timeout for a broker to answer
// and for every topic the stages use (created first with --create-topics),
// then returns an error: a wrong address or a missing topic is a mistake
// to see, not a condition that passes (docs/stream.md, "Health"). Once a
// broker answered, hc checks the brokers until ctx ends.
func (rc *runConfig) waitForKafka(ctx context.Context, cfg stage.Config, hc *health.Checks) error {
	if err := cfg.Security.WaitReachable(ctx, cfg.Brokers, rc.startup); err != nil {
		return err
	}
	hc.SetBrokers(nil)
	go hc.WatchBrokers(ctx, cfg.Security, cfg.Brokers, 5*time.Second)
	if rc.createTopics > 0 {
		cctx, cancel := context.WithTimeout(ctx, rc.startup)
		err := cfg.CreateTopics(cctx, rc.createTopics)
		cancel()
		if err != nil {
			return fmt.Errorf("--create-topics at %s: %w", strings.Join(cfg.Brokers, ","), err)
		}
	}
	// Every topic read or written must exist: found now, not when the first
	// output is retried for ever.
	if err := cfg.WaitTopics(ctx, rc.score, rc.advantage, rc.startup); err != nil {
		return err
	}
	if rc.advantage { // only logs; a failed look-up is not worth stopping for
		_, _, _ = cfg.CheckStatePartitions(ctx)
	}
	return nil
}

// newScorer builds the score stage's scorer; with --scorer-follow-policy
// the in-process scorer loads each checkpoint announced on the policy
// topic until ctx ends. release releases the scorer.
func (rc *runConfig) newScorer(ctx context.Context, cfg stage.Config, reg *prometheus.Registry) (src scorer.Scorer, release func(), err error) {
	var opts []local.Option
	if rc.scorerFollow { // the model of --scorer-model is version 0, announced or not yet
		opts = append(opts, local.WithPolicyVersion(0))
	}
	src, sc, closeScorer, err := rc.scorers.newScorer(cfg.Logger, reg, opts...)
	if err != nil {
		return nil, nil, err
	}
	if sc != nil && rc.scorerFollow {
		if cfg.Topics.Policy == "" {
			closeScorer()
			return nil, nil, fmt.Errorf("--scorer-follow-policy needs --topic-policy")
		}
		policyfollow.Start(ctx, sc, cfg.Brokers, cfg.Security, cfg.Topics.Policy, cfg.Logger, policy.WithRegisterer(reg))
	}
	return src, closeScorer, nil
}

// drain waits for the n stages still running to return, for at most
// --shutdown-timeout, and returns the first stage error (first, when a
// stage ended the run).
func (rc *runConfig) drain(errc <-chan error, n int, first error, log zerolog.Logger) error {
	log.Info().Dur("deadline_ms", rc.shutdown).Msg("shutting down: draining in-flight work")
	deadline := time.After(rc.shutdown)
	for ; n > 0; n-- {
		select {
		case err := <-errc:
			if first == nil {
				first = err
			}
		case <-deadline:
			return fmt.Errorf("shutdown did not finish within %v", rc.shutdown)
		}
	}
	log.Info().Msg("stopped")
	return first
}

// runScoreStage waits for a scorer to answer, for as long as it takes
// (scorer pods may need minutes to load a model; the process is not ready
// meanwhile and says on /readyz and in its log what it waits for), then
// runs the score stage until ctx ends.
func runScoreStage(ctx context.Context, cfg stage.Config, src scorer.Scorer, prod *producers.Producer, check *health.Stage, log zerolog.Logger) error {
	var lastLog time.Time
	check.Wait("waiting for a scorer to answer")
	for {
		s, err := stage.NewScoreStage(ctx, cfg, src, prod)
		if err == nil {
			check.Start(s)
			log.Info().Msg("a scorer answered: the score stage starts")
			return s.Run(ctx)
		}
		if errors.Is(err, stage.ErrScorerWithoutStatistics) {
			return err // the scorer answered: waiting will not help
		}
		if ctx.Err() != nil {
			return nil
		}
		check.Wait("waiting for a scorer to answer: " + err.Error())
		if time.Since(lastLog) >= 30*time.Second {
			log.Warn().Err(err).Msg("waiting for a scorer to answer (not ready until one does)")
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
