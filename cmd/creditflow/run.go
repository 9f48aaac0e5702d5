package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/creditflow/creditflow/processors/stage"
)

func init() {
	register("run", "run the score and/or advantage stage against Kafka brokers", runRun)
}

func runRun(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runStages(ctx, args)
}

// runStages is `creditflow run` until ctx ends (SIGTERM) or a stage fails:
// its command line read into a checked runConfig, then run.
func runStages(ctx context.Context, args []string) error {
	rc, err := parseRun(args)
	if err != nil {
		return err
	}
	return rc.run(ctx)
}

// runConfig is `creditflow run` as its command line (flags, environment,
// config file) gives it, checked: which stages run and with which settings.
// Reading it starts nothing; runstages.go runs it.
type runConfig struct {
	stage            stage.Config // checked; Logger and Security set, Metrics set by run
	score, advantage bool         // the stages to run (--stage)
	stageName        string       // --stage as given
	scorers          scorerFlags
	scorerFollow     bool // --scorer-follow-policy
	createTopics     int  // partitions of topics to create (0: expect them)
	metricsAddr      string
	shutdown         time.Duration
	startup          time.Duration
	livenessStall    time.Duration
	lagInterval      time.Duration
}

// parseRun reads and checks the command line of `creditflow run`. A
// command line the command refuses is a usageError (exit status 2); a
// TLS or password file it cannot read is an error of its own.
func parseRun(args []string) (*runConfig, error) {
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
		create = fs.Int("create-topics", 0, "create missing topics as the chart's KafkaTopics declare them (needs CREATE): trajectories, scored, samples and the state topic with this many partitions, the state and policy topics compacted, the others with --retention (0: expect them to exist; docs/kafka.md)")
		fs.IntVar(&cfg.ReplicationFactor, "replication-factor", 0, "with --create-topics: replication factor of the topics created (0: the brokers' default); above 1 the topics also get min.insync.replicas 2")
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
		fs.StringVar((*string)(&cfg.Credit.Method), "method", string(cfg.Credit.Method), "credit assignment: lapo or attnsr")
	})
	fs.inGroup(groupLAPO, func() {
		fs.StringVar((*string)(&cfg.Direction), "direction", string(cfg.Direction), "backward or forward (ablation)")
		fs.StringVar((*string)(&cfg.LAPOStatistic), "lapo-statistic", string(cfg.LAPOStatistic), lapoStatisticHelp)
	})
	fs.inGroup(groupAttnSR, func() {
		layers = fs.String("layers", "", "comma-separated layer indices (default: the depth mapping of docs/method.md)")
	})
	applyCredit := creditFlags(fs, &cfg.Credit)
	applyWindow := windowFlags(fs, &cfg.Window)
	fs.inGroup(groupWindows, func() {
		fs.DurationVar(&cfg.IdleAfter, "idle-after", cfg.IdleAfter, "an idle partition advances event time by processing time after this long (0: never)")
		fs.IntVar(&cfg.Limits.MaxTurns, "max-turns", cfg.Limits.MaxTurns, "dead-letter trajectories with more turns")
		fs.IntVar(&cfg.Limits.MaxTokens, "max-tokens", cfg.Limits.MaxTokens, "dead-letter trajectories with more tokens")
		fs.IntVar(&cfg.Limits.MaxRecordBytes, "max-record-bytes", cfg.Limits.MaxRecordBytes, "dead-letter records larger than this")
	})
	kafkaSizeFlags(fs, &cfg)
	topicRetentionFlags(fs, &cfg)
	fs.inGroup(groupObservability, func() {
		metricsAddr = fs.String("metrics-addr", "127.0.0.1:9464", "serve /metrics, /readyz, /livez and /healthz here (empty: off; docs/stream.md)")
		livenessStall = fs.Duration("liveness-stall", 5*time.Minute, "/livez fails when a partition's input has made no progress for this long: records waiting that the stage takes none of, or (score stage) records it took and does not commit (0: never)")
		lagInterval = fs.Duration("lag-interval", 15*time.Second, "read the stages' consumer-group lag from the brokers this often (creditflow_consumer_group_lag_records; 0: off)")
		logLevel = fs.String("log-level", "info", "log level (JSON logs on stderr)")
	})
	if err := fs.parse(args, true); err != nil {
		return nil, err
	}
	if err := applyCredit(); err != nil {
		return nil, err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return nil, err
	}
	cfg.Logger = log
	cfg.Brokers = splitList(*kf.brokers)
	applyWindow()
	if cfg.Security, err = kf.security(); err != nil {
		return nil, err
	}
	for _, l := range splitList(*layers) {
		n, err := strconv.Atoi(l)
		if err != nil {
			return nil, usagef("--layers: %q is not a layer index", l)
		}
		cfg.Layers = append(cfg.Layers, n)
	}
	rc := &runConfig{score: *which == "both" || *which == "score", advantage: *which == "both" || *which == "advantage",
		stageName: *which, scorers: sf, scorerFollow: *scorerFollow, createTopics: *create, metricsAddr: *metricsAddr,
		shutdown: *shutdown, startup: *startup, livenessStall: *livenessStall, lagInterval: *lagInterval}
	if !rc.score && !rc.advantage {
		return nil, usagef("--stage %q: use score, advantage or both", *which)
	}
	if rc.score && *sf.endpoints == "" {
		return nil, usageError{errors.New("no scorer chosen: set --scorers to the scorer pods (URLs, or dns+http://SERVICE:PORT to follow a headless service), or --scorers local for the in-process CPU reference model")}
	}
	if err := cfg.Check(); err != nil {
		return nil, asUsage(err)
	}
	rc.stage = cfg
	return rc, nil
}
