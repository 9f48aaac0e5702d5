package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/policyfollow"
	"github.com/creditflow/creditflow/scorer/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func init() {
	register("scorer", "serve the CPU reference scorer over the scorer protocol", runScorer)
}

func runScorer(args []string) error {
	fs := newFlagSet("scorer", `usage: creditflow scorer [--listen ADDR] [--model DIR] [--policy-version N]
                        [--tls-cert F --tls-key F] [--token-file F] [--max-request-bytes N]
                        [--follow-policy --brokers HOST:PORT,...]

Serves a model over the creditflow.scorer/v1 protocol (docs/scorer-protocol.md):
GET /v1/info, POST /v1/score, POST /v1/attention, GET /healthz, GET /metrics.
SIGTERM or SIGINT drains in-flight requests and exits.`)
	var listen, dir, certFile, keyFile, tokenFile, level, policyTopic *string
	var version, maxBytes *int64
	var maxRows, maxTokens, maxRequests, maxCalls, maxCtx *int
	var follow *bool
	fs.inGroup(groupGeneral, func() {
		fs.String("config", "", "JSON config file: an object of flag names to values (also CREDITFLOW_CONFIG)")
		listen = fs.String("listen", "127.0.0.1:8470", "address to serve on (host:port; 0.0.0.0:8470 in a pod)")
	})
	fs.inGroup(groupScorer, func() {
		dir = fs.String("model", "tiny", modelFlagHelp)
		maxCtx = fs.Int("max-context", 0, maxContextFlagHelp)
		maxBytes = fs.Int64("max-request-bytes", 64<<20, "largest request body accepted (413 above)")
		maxRows = fs.Int("max-rows", 65536, "most rows (score) or jobs (attention) in one request (413 above)")
		maxTokens = fs.Int("max-tokens", 4<<20, "most tokens in one request (413 above)")
		maxRequests = fs.Int("max-concurrent-requests", 64, "requests served at once (503 above)")
		maxCalls = fs.Int("max-model-calls", 0, "model calls run at once (0: GOMAXPROCS)")
	})
	fs.inGroup(groupPolicy, func() {
		version = fs.Int64("policy-version", -1, "policy version of the weights, reported by /v1/info and with every answer (-1: unknown, weights never announced)")
		follow = fs.Bool("follow-policy", false, "follow the policy topic on --brokers: load each newly announced checkpoint folder and answer with its version")
		policyTopic = fs.String("topic-policy", policy.DefaultTopic, "policy topic followed with --follow-policy")
	})
	kf := addKafkaFlags(fs)
	fs.inGroup(groupSecurity, func() {
		certFile = fs.String("tls-cert", "", "PEM certificate file: serve HTTPS (needs --tls-key)")
		keyFile = fs.String("tls-key", "", "PEM private key file for --tls-cert")
		tokenFile = fs.String("token-file", "", "file holding the bearer token required on /v1/ paths (surrounding whitespace ignored)")
	})
	fs.inGroup(groupObservability, func() {
		level = fs.String("log-level", "info", "log level: debug (one line per request), info, warn, error")
	})
	if err := fs.parse(args, true); err != nil {
		return err
	}
	if (*certFile == "") != (*keyFile == "") {
		return usagef("--tls-cert and --tls-key go together; give both or neither")
	}
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	log = log.With().Str("component", "scorer").Logger()

	var token string
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("--token-file %s is empty; put the bearer token in it or drop the flag", *tokenFile)
		}
	}

	m, err := loadModelFlag(*dir, *maxCtx)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	sc := local.New(m, local.WithPolicyVersion(*version), local.WithMaxConcurrent(*maxCalls), local.WithRegisterer(reg))
	opts := []server.Option{
		server.WithLogger(log),
		server.WithRegistry(reg),
		server.WithToken(token),
		server.WithMaxRequestBytes(*maxBytes),
		server.WithMaxRows(*maxRows),
		server.WithMaxTokens(*maxTokens),
		server.WithMaxConcurrentRequests(*maxRequests),
	}
	if *certFile != "" {
		opts = append(opts, server.WithTLS(*certFile, *keyFile))
	}
	info := m.Info()
	log.Info().Str("model", info.Name).Str("architecture", info.Architecture).Int("layers", info.Layers).
		Int("vocab", info.VocabSize).Int("max_context", info.MaxContext).Int64("policy_version", *version).Msg("scorer model loaded")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *follow {
		sec, err := kf.security()
		if err != nil {
			return err
		}
		policyfollow.Start(ctx, sc, splitList(*kf.brokers), sec, *policyTopic, log, policy.WithRegisterer(reg))
	}
	return server.New(sc, opts...).ListenAndServe(ctx, *listen)
}
