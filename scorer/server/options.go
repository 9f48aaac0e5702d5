package server

// The server's options and its metrics.

import (
	"crypto/tls"
	"time"

	"github.com/creditflow/creditflow/scorer/internal/scorermetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Option configures a Server.
type Option func(*config)

type config struct {
	certFile, keyFile string
	tlsConfig         *tls.Config
	token             string
	maxRequestBytes   int64
	maxRows           int
	maxTokens         int
	maxConcurrent     int
	shutdownTimeout   time.Duration
	log               zerolog.Logger
	registry          *prometheus.Registry
}

// WithTLS serves HTTPS with the PEM certificate and key files.
func WithTLS(certFile, keyFile string) Option {
	return func(c *config) { c.certFile, c.keyFile = certFile, keyFile }
}

// WithTLSConfig serves HTTPS with cfg (it must hold the certificates,
// e.g. for client-certificate authentication). WithTLS files are added to it.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) { c.tlsConfig = cfg }
}

// WithToken requires "Authorization: Bearer <token>" on /v1/ paths.
// An empty token disables the check. /healthz and /metrics stay open.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithMaxRequestBytes bounds a request body (default 64 MiB); larger ones get 413.
func WithMaxRequestBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxRequestBytes = n
		}
	}
}

// WithMaxRows bounds the rows of a score request and the jobs of an
// attention request (default 65,536); more get 413.
func WithMaxRows(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxRows = n
		}
	}
}

// WithMaxTokens bounds the tokens of a request (context plus target of every
// row; tokens of every job), default 4,194,304; more get 413.
func WithMaxTokens(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxTokens = n
		}
	}
}

// WithMaxConcurrentRequests bounds the score and attention requests served
// at once (default 64); past it the server answers 503 overloaded at once.
func WithMaxConcurrentRequests(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxConcurrent = n
		}
	}
}

// WithShutdownTimeout bounds how long a graceful shutdown waits for
// in-flight requests (default 30 s).
func WithShutdownTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.shutdownTimeout = d
		}
	}
}

// WithLogger sets the request logger (default: no logs).
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithRegistry registers the server's metrics with reg and serves reg
// on /metrics (default: a fresh registry holding the server's metrics).
func WithRegistry(reg *prometheus.Registry) Option {
	return func(c *config) { c.registry = reg }
}

type serverMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
	items    *prometheus.CounterVec
	tokens   *prometheus.CounterVec
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_server_requests_total",
			Help: "Scorer protocol requests answered, by op and HTTP status.",
		}, []string{"op", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_server_request_duration_seconds",
			Help:    "Time to answer a scorer protocol request, by op.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"op"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "creditflow_scorer_server_in_flight_requests",
			Help: "Score and attention requests being served.",
		}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_server_items_total",
			Help: "Row sets (score) and jobs (attention) served.",
		}, []string{"op"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_server_tokens_total",
			Help: "Tokens received in served requests, by op.",
		}, []string{"op"}),
	}
	m.requests = scorermetrics.Shared(reg, m.requests)
	m.duration = scorermetrics.Shared(reg, m.duration)
	m.inFlight = scorermetrics.Shared(reg, m.inFlight)
	m.items = scorermetrics.Shared(reg, m.items)
	m.tokens = scorermetrics.Shared(reg, m.tokens)
	return m
}
