package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/gcpolicy"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/local"
)

func init() {
	register("run", "run the score and/or advantage stage against Kafka brokers", runRun)
}

func runRun(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runStages(ctx, args)
}

// runStages is `creditflow run` until ctx ends (SIGTERM) or a stage fails.
func runStages(ctx context.Context, args []string) error {
	cfg := stage.DefaultConfig()
	fs := newFlagSet("run", `usage: creditflow run [--brokers HOST:PORT,...] [--stage score|advantage|both] [--method lapo|attnsr] [flags]

Runs the score stage, the advantage stage or both against Kafka brokers: trajectories are scored
(by scorer pods, or in-process with the CPU reference model), grouped by prompt and turned into
per-token advantages on the samples topic. Settings come from flags, CREDITFLOW_<FLAG> environment
variables and --config (in increasing order of precedence: file, environment, flags). SIGTERM drains
in-flight work, writes state, commits and exits. Docs: docs/stream.md, docs/method.md, docs/kafka.md.`)
	var which, layers, metricsAddr, logLevel *string
	var sf scorerFlags
	var scorerFollow *bool
	var create *int
	var shutdown, startup, livenessStall, lagInterval *time.Duration
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		which = fs.String("stage", "both", "which stage to run: score, advantage or both")
		shutdown = fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM, exit after at most this long")
	})
	kf := addKafkaFlags(fs)
	fs.inGroup(groupKafka, func() {
		fs.StringVar(&cfg.GroupID, "group", cfg.GroupID, "consumer group prefix (<group>.score, <group>.advantage); a replay with new settings uses a new group")
		create = fs.Int("create-topics", 0, "create missing topics with this many partitions (0: expect them to exist)")
		fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "with --create-topics: replication factor of the topics created (0: the brokers' default)")
		startup = fs.Duration("startup-timeout", 30*time.Second, "at start, wait at most this long for a broker to answer and for every topic used to exist, then exit non-zero (scorers are waited for without a limit, not ready meanwhile)")
		fs.DurationVar(&cfg.SessionTimeout, "session-timeout", 10*time.Second, "consumer group session timeout: how soon the partitions of a replica that died move to the others")
		fs.DurationVar(&cfg.CommitInterval, "commit-interval", cfg.CommitInterval, "how often offsets and state snapshots are committed")
	})
	fs.inGroup(groupTopics, func() {
		fs.StringVar(&cfg.Topics.Trajectories, "topic-trajectories", cfg.Topics.Trajectories, "input topic of rollouts")
		fs.StringVar(&cfg.Topics.Scored, "topic-scored", cfg.Topics.Scored, "topic between the stages")
		fs.StringVar(&cfg.Topics.Samples, "topic-samples", cfg.Topics.Samples, "output topic of training samples")
		fs.StringVar(&cfg.Topics.DeadLetters, "topic-dead-letters", cfg.Topics.DeadLetters, "dead-letter topic")
		fs.StringVar(&cfg.Topics.State, "topic-state", cfg.Topics.State, "compacted changelog of the advantage stage's state")
	})
	policyFlags(fs, &cfg)
	fs.inGroup(groupScorer, func() {
		sf = addScorerFlags(fs, true)
		scorerFollow = fs.Bool("scorer-follow-policy", false, "in-process scorer: load each newer checkpoint announced on --topic-policy and score with it (the model of --scorer-model is version 0)")
		fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "score stage: trajectories in flight per partition (backpressure)")
		fs.IntVar(&cfg.MaxInFlightBytes, "max-inflight-bytes", cfg.MaxInFlightBytes, "score stage: record bytes in flight per partition (at least one record)")
		fs.IntVar(&cfg.MaxUnackedBytes, "max-unacked-bytes", cfg.MaxUnackedBytes, "advantage stage: encoded samples written and not yet acknowledged per partition (at least 4 groups)")
	})
	fs.inGroup(groupCredit, func() {
		fs.StringVar(&cfg.Credit.Method, "method", cfg.Credit.Method, "credit assignment: lapo or attnsr")
	})
	fs.inGroup(groupLAPO, func() {
		fs.StringVar(&cfg.Direction, "direction", cfg.Direction, "backward or forward (ablation)")
		fs.StringVar(&cfg.LAPOStatistic, "lapo-statistic", cfg.LAPOStatistic, lapoStatisticHelp)
	})
	fs.inGroup(groupAttnSR, func() {
		layers = fs.String("layers", "", "comma-separated layer indices (default: the depth mapping of docs/method.md)")
	})
	credit := creditFlags(fs, &cfg.Credit)
	window := windowFlags(fs, &cfg.Window)
	fs.inGroup(groupWindows, func() {
		fs.DurationVar(&cfg.IdleAfter, "idle-after", cfg.IdleAfter, "an idle partition advances event time by processing time after this long (0: never)")
		fs.IntVar(&cfg.Limits.MaxTurns, "max-turns", cfg.Limits.MaxTurns, "dead-letter trajectories with more turns")
		fs.IntVar(&cfg.Limits.MaxTokens, "max-tokens", cfg.Limits.MaxTokens, "dead-letter trajectories with more tokens")
		fs.IntVar(&cfg.Limits.MaxRecordBytes, "max-record-bytes", cfg.Limits.MaxRecordBytes, "dead-letter records larger than this")
	})
	kafkaSizeFlags(fs, &cfg)
	fs.inGroup(groupObservability, func() {
		metricsAddr = fs.String("metrics-addr", "127.0.0.1:9464", "serve /metrics, /readyz, /livez and /healthz here (empty: off; docs/stream.md)")
		livenessStall = fs.Duration("liveness-stall", 5*time.Minute, "/livez fails when a partition's input has made no progress for this long: records waiting that the stage takes none of, or (score stage) records it took and does not commit (0: never)")
		lagInterval = fs.Duration("lag-interval", 15*time.Second, "read the stages' consumer-group lag from the brokers this often (creditflow_consumer_group_lag_records; 0: off)")
		logLevel = fs.String("log-level", "info", "log level (JSON logs on stderr)")
	})
	if err := fs.parse(args, true); err != nil {
		return err
	}
	if err := credit(); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	cfg.Logger = log
	cfg.Brokers = splitList(*kf.brokers)
	window()
	if cfg.Security, err = kf.security(); err != nil {
		return err
	}
	for _, l := range splitList(*layers) {
		n, err := strconv.Atoi(l)
		if err != nil {
			return usagef("--layers: %q is not a layer index", l)
		}
		cfg.Layers = append(cfg.Layers, n)
	}
	runScore, runAdv := *which == "both" || *which == "score", *which == "both" || *which == "advantage"
	if !runScore && !runAdv {
		return usagef("--stage %q: use score, advantage or both", *which)
	}
	if runScore && *sf.endpoints == "" {
		return usageError{errors.New("no scorer chosen: set --scorers to the scorer pods (URLs, or dns+http://SERVICE:PORT to follow a headless service), or --scorers local for the in-process CPU reference model")}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	cfg.Metrics = stage.NewMetrics(reg)
	if err := cfg.Check(); err != nil {
		return asUsage(err)
	}
	start := log.Info().Strs("brokers", cfg.Brokers).Str("security", cfg.Security.String()).Str("stage", *which).
		Str("method", cfg.Credit.Method)
	if gc, ok := gcpolicy.Applied(); ok { // main applied it; a test calling run directly did not
		start = start.Stringer("gc", gc)
	}
	start.Msg("creditflow run starting")

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	hc := newHealth(cfg.CommitInterval, *livenessStall)
	var scoreCheck, advCheck *stageCheck
	if runScore {
		scoreCheck = hc.stage("score", "waiting for the brokers and topics", true)
	}
	if runAdv {
		advCheck = hc.stage("advantage", "waiting for the brokers and topics", false)
	}
	if *metricsAddr != "" {
		stopMetrics, err := serveMetrics(*metricsAddr, reg, log, hc.routes())
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	// Brokers and topics are waited for at most --startup-timeout, then
	// the process exits: a wrong address or a missing topic is a mistake
	// to see, not a condition that passes (docs/stream.md, "Health").
	if err := cfg.Security.WaitReachable(ctx, cfg.Brokers, *startup); err != nil {
		return err
	}
	hc.setBrokers(nil)
	go hc.watchBrokers(ctx, cfg.Security, cfg.Brokers, 5*time.Second)
	if *create > 0 {
		cctx, cancel := context.WithTimeout(ctx, *startup)
		err := producers.EnsureTopics(cctx, cfg.Brokers, cfg.Security, cfg.TopicSpecs(*create)...)
		cancel()
		if err != nil {
			return fmt.Errorf("--create-topics at %s: %w", strings.Join(cfg.Brokers, ","), err)
		}
	}
	// Every topic read or written must exist: found now, not when the first
	// output is retried for ever.
	if err := cfg.WaitTopics(ctx, runScore, runAdv, *startup); err != nil {
		return err
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(log), producers.WithRegisterer(reg))
	if err != nil {
		return err
	}
	defer prod.Close()
	if *lagInterval > 0 {
		lag, err := consumers.NewLagExporter(cfg.Brokers, cfg.Security, *lagInterval, reg, log)
		if err != nil {
			return err
		}
		if runScore {
			lag.Watch(cfg.ScoreGroup())
		}
		if runAdv {
			lag.Watch(cfg.AdvantageGroup())
		}
		go lag.Run(ctx)
	}

	errc := make(chan error, 2)
	n := 0
	if runScore {
		var scorerOpts []local.Option
		if *scorerFollow { // the model of --scorer-model is version 0, announced or not yet
			scorerOpts = append(scorerOpts, local.WithPolicyVersion(0))
		}
		scorer, sc, closeScorer, err := sf.newScorer(log, reg, scorerOpts...)
		if err != nil {
			return err
		}
		defer closeScorer()
		if sc != nil && *scorerFollow {
			if cfg.Topics.Policy == "" {
				return fmt.Errorf("--scorer-follow-policy needs --topic-policy")
			}
			followPolicy(ctx, sc, cfg.Brokers, cfg.Security, cfg.Topics.Policy, log, policy.WithRegisterer(reg))
		}
		n++
		go func() { errc <- runScoreStage(ctx, cfg, scorer, prod, scoreCheck, log) }()
	}
	if runAdv {
		a, err := stage.NewAdvantageStage(cfg, prod)
		if err != nil {
			return err
		}
		advCheck.start(a)
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
	log.Info().Dur("deadline_ms", *shutdown).Msg("shutting down: draining in-flight work")
	deadline := time.After(*shutdown)
	for ; n > 0; n-- {
		select {
		case err := <-errc:
			if first == nil {
				first = err
			}
		case <-deadline:
			return fmt.Errorf("shutdown did not finish within %v", *shutdown)
		}
	}
	log.Info().Msg("stopped")
	return first
}

// runScoreStage waits for a scorer to answer, for as long as it takes
// (scorer pods may need minutes to load a model; the process is not ready
// meanwhile and says on /readyz and in its log what it waits for), then
// runs the score stage until ctx ends.
func runScoreStage(ctx context.Context, cfg stage.Config, src scorer.Scorer, prod *producers.Producer, check *stageCheck, log zerolog.Logger) error {
	var lastLog time.Time
	check.wait("waiting for a scorer to answer")
	for {
		s, err := stage.NewScoreStage(ctx, cfg, src, prod)
		if err == nil {
			check.start(s)
			log.Info().Msg("a scorer answered: the score stage starts")
			return s.Run(ctx)
		}
		if errors.Is(err, stage.ErrScorerWithoutStatistics) {
			return err // the scorer answered: waiting will not help
		}
		if ctx.Err() != nil {
			return nil
		}
		check.wait("waiting for a scorer to answer: " + err.Error())
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
