package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/creditflow/creditflow/gpu"

	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
)

func init() {
	register("run", "run the score and/or advantage stage against Kafka brokers", runRun)
}

// kafkaFlags defines the Kafka connection flags shared by commands.
type kafkaFlags struct {
	brokers                     *string
	tlsCA, tlsCert, tlsKey      *string
	tlsInsecure                 *bool
	saslMech, saslUser, saslPwd *string
	saslPwdFile                 *string
}

func addKafkaFlags(fs *flag.FlagSet) *kafkaFlags {
	return &kafkaFlags{
		brokers:     fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port"),
		tlsCA:       fs.String("kafka-tls-ca", "", "PEM CA file: enables TLS to the brokers"),
		tlsCert:     fs.String("kafka-tls-cert", "", "PEM client certificate (mutual TLS)"),
		tlsKey:      fs.String("kafka-tls-key", "", "PEM client key (mutual TLS)"),
		tlsInsecure: fs.Bool("kafka-tls-insecure", false, "TLS without verifying the brokers' certificates (testing only)"),
		saslMech:    fs.String("sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
		saslUser:    fs.String("sasl-user", "", "SASL user name"),
		saslPwd:     fs.String("sasl-password", "", "SASL password (prefer --sasl-password-file or CREDITFLOW_SASL_PASSWORD)"),
		saslPwdFile: fs.String("sasl-password-file", "", "file holding the SASL password"),
	}
}

func (k *kafkaFlags) security() (kafkasec.Config, error) {
	var sec kafkasec.Config
	if *k.tlsCA != "" || *k.tlsCert != "" || *k.tlsInsecure {
		t, err := kafkasec.LoadTLS(*k.tlsCA, *k.tlsCert, *k.tlsKey, *k.tlsInsecure)
		if err != nil {
			return sec, err
		}
		sec.TLS = t
	}
	sec.SASLMechanism, sec.Username, sec.Password = *k.saslMech, *k.saslUser, *k.saslPwd
	if *k.saslPwdFile != "" {
		b, err := os.ReadFile(*k.saslPwdFile)
		if err != nil {
			return sec, fmt.Errorf("--sasl-password-file: %w", err)
		}
		sec.Password = strings.TrimSpace(string(b))
	}
	if _, err := sec.Mechanism(); err != nil {
		return sec, err
	}
	return sec, nil
}

func runRun(args []string) error {
	cfg := stage.DefaultConfig()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
	kf := addKafkaFlags(fs)
	which := fs.String("stage", "both", "which stage to run: score, advantage or both")
	fs.StringVar(&cfg.GroupID, "group", cfg.GroupID, "consumer group prefix (<group>.score, <group>.advantage); a replay with new settings uses a new group")
	fs.StringVar(&cfg.Topics.Trajectories, "topic-trajectories", cfg.Topics.Trajectories, "input topic of rollouts")
	fs.StringVar(&cfg.Topics.Scored, "topic-scored", cfg.Topics.Scored, "topic between the stages")
	fs.StringVar(&cfg.Topics.Samples, "topic-samples", cfg.Topics.Samples, "output topic of training samples")
	fs.StringVar(&cfg.Topics.DeadLetters, "topic-dead-letters", cfg.Topics.DeadLetters, "dead-letter topic")
	fs.StringVar(&cfg.Topics.State, "topic-state", cfg.Topics.State, "compacted changelog of the advantage stage's state")
	policyFlags(fs, &cfg)
	create := fs.Int("create-topics", 0, "create missing topics with this many partitions (0: expect them to exist)")
	fs.StringVar(&cfg.Credit.Method, "method", cfg.Credit.Method, "credit assignment: lapo or attnsr")
	fs.StringVar(&cfg.Direction, "direction", cfg.Direction, "LAPO: backward or forward (ablation)")
	credit := creditFlags(fs, &cfg.Credit)
	layers := fs.String("layers", "", "AttnSR: comma-separated layer indices (default: SPEC §3.1 mapping for the model's depth)")
	scorers := fs.String("scorers", "", "scorer endpoints, comma-separated URLs (default: the in-process CPU scorer)")
	scorerModel := fs.String("scorer-model", "tiny", "in-process scorer: "+modelFlagHelp)
	scorerToken := fs.String("scorer-token-file", "", "file holding the bearer token for the scorer endpoints")
	scorerCA := fs.String("scorer-ca", "", "PEM CA file for https scorer endpoints")
	window := windowFlags(fs, &cfg.Window)
	fs.DurationVar(&cfg.IdleAfter, "idle-after", cfg.IdleAfter, "an idle partition advances event time by processing time after this long (0: never)")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "score stage: trajectories in flight per partition (backpressure)")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", 10*time.Second, "consumer group session timeout: how soon the partitions of a replica that died move to the others")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", cfg.CommitInterval, "how often offsets and state snapshots are committed")
	fs.IntVar(&cfg.Limits.MaxTurns, "max-turns", cfg.Limits.MaxTurns, "dead-letter trajectories with more turns")
	fs.IntVar(&cfg.Limits.MaxTokens, "max-tokens", cfg.Limits.MaxTokens, "dead-letter trajectories with more tokens")
	fs.IntVar(&cfg.Limits.MaxRecordBytes, "max-record-bytes", cfg.Limits.MaxRecordBytes, "dead-letter records larger than this")
	kafkaSizeFlags(fs, &cfg)
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve /metrics here (empty: off)")
	logLevel := fs.String("log-level", "info", "log level (JSON logs on stderr)")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM, exit after at most this long")
	if err := loadSettings(fs, args); err != nil {
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
			return fmt.Errorf("--layers: %q is not a layer index", l)
		}
		cfg.Layers = append(cfg.Layers, n)
	}
	runScore, runAdv := *which == "both" || *which == "score", *which == "both" || *which == "advantage"
	if !runScore && !runAdv {
		return fmt.Errorf("--stage %q: use score, advantage or both", *which)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = stage.NewMetrics(reg)
	if err := cfg.Check(); err != nil {
		return err
	}
	log.Info().Strs("brokers", cfg.Brokers).Str("security", cfg.Security.String()).Str("stage", *which).
		Str("method", cfg.Credit.Method).Msg("creditflow run starting")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		srv := &http.Server{Addr: *metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("metrics server")
			}
		}()
		defer srv.Close()
	}
	if *create > 0 {
		if err := producers.EnsureTopics(ctx, cfg.Brokers, cfg.Security, cfg.TopicSpecs(*create)...); err != nil {
			return err
		}
	}
	prod, err := producers.New(cfg.ProducerConfig(), producers.WithLogger(log), producers.WithRegisterer(reg))
	if err != nil {
		return err
	}
	defer prod.Close()

	errc := make(chan error, 2)
	n := 0
	if runScore {
		var scorer gpu.Scorer
		if *scorers == "" {
			m, err := loadModelFlag(*scorerModel)
			if err != nil {
				return fmt.Errorf("--scorer-model: %w", err)
			}
			scorer = gpu.NewLocal(m, gpu.WithLocalRegisterer(reg))
		} else {
			opts := []gpu.ClientOption{gpu.WithLogger(log), gpu.WithRegisterer(reg)}
			if *scorerToken != "" {
				b, err := os.ReadFile(*scorerToken)
				if err != nil {
					return fmt.Errorf("--scorer-token-file: %w", err)
				}
				opts = append(opts, gpu.WithBearerToken(strings.TrimSpace(string(b))))
			}
			if *scorerCA != "" {
				opts = append(opts, gpu.WithCAFile(*scorerCA))
			}
			c, err := gpu.NewClient(splitList(*scorers), opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			scorer = c
		}
		s, err := stage.NewScoreStage(ctx, cfg, scorer, prod)
		if err != nil {
			return err
		}
		n++
		go func() { errc <- s.Run(ctx) }()
	}
	if runAdv {
		a, err := stage.NewAdvantageStage(cfg, prod)
		if err != nil {
			return err
		}
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
	log.Info().Dur("deadline", *shutdown).Msg("shutting down: draining in-flight work")
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
