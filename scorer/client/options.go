package client

// Client configuration: the retry policy and the functional options.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// RetryPolicy bounds retries of failed requests.
type RetryPolicy struct {
	MaxAttempts int           // attempts per request, first included (default 4)
	BaseBackoff time.Duration // backoff before the first retry (default 20 ms), doubled each retry
	MaxBackoff  time.Duration // backoff cap (default 1 s); each wait is uniform in [0, backoff]
}

// Option configures a Client.
type Option func(*config) error

type config struct {
	tlsConfig      *tls.Config
	token          string
	tokenFile      *tokenFile // WithBearerTokenFile; wins over token
	requestTimeout time.Duration
	budget         int
	maxWait        time.Duration
	retry          RetryPolicy
	unhealthyAfter int
	probeInterval  time.Duration
	inFlightPerEP  int
	infoTTL        time.Duration
	lookup         func(ctx context.Context, host string) ([]string, error)
	resolveEvery   time.Duration
	maxDiscovered  int
	healthInterval time.Duration
	reg            prometheus.Registerer
	log            zerolog.Logger
}

// WithTLSConfig uses cfg for https endpoints (endpoints without a scheme then default to https).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) error { c.tlsConfig = cfg.Clone(); return nil }
}

// WithCAFile trusts the PEM certificates in path for https endpoints
// (endpoints without a scheme then default to https).
func WithCAFile(path string) Option {
	return func(c *config) error {
		pem, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading scorer CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("scorer CA file %s holds no PEM certificate", path)
		}
		if c.tlsConfig == nil {
			c.tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c.tlsConfig.RootCAs = pool
		return nil
	}
}

// WithBearerTokenFile sends "Authorization: Bearer <token>" with every
// request, the token read from path (surrounding white space dropped) and
// read again when the file changes (checked at most once a second), so that
// a rotated secret is used without a restart. An unreadable or empty file
// is an error here; later, a file that cannot be read keeps the last token.
func WithBearerTokenFile(path string) Option {
	return func(c *config) error {
		f, err := newTokenFile(path)
		if err != nil {
			return err
		}
		c.tokenFile = f
		return nil
	}
}

// WithBearerToken sends "Authorization: Bearer <token>" with every request.
func WithBearerToken(token string) Option {
	return func(c *config) error { c.token = strings.TrimSpace(token); return nil }
}

// WithRequestTimeout bounds one attempt of one request (default 30 s); a
// timed-out attempt is retried on another endpoint.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("request timeout must be positive, got %v", d)
		}
		c.requestTimeout = d
		return nil
	}
}

// DefaultTokenBudget is the tokens (rows' context plus target, as the
// server's limit counts them) of a coalesced request: about 16 search-QA
// trajectories (≈ 3,900 row tokens each), enough that the per-request cost
// of HTTP on both ends is not the largest part of the score stage's client
// cost (docs/performance-passes.md measures 32,768 against it). A pod that shares
// prefixes forwards well under the budget's count for LAPO rows (1.6x
// fewer tokens on the search-QA shape in the pod's cfpod.bench).
const DefaultTokenBudget = 65536

// WithTokenBudget bounds the tokens of a coalesced request (default
// DefaultTokenBudget).
func WithTokenBudget(tokens int) Option {
	return func(c *config) error {
		if tokens <= 0 {
			return fmt.Errorf("token budget must be positive, got %d", tokens)
		}
		c.budget = tokens
		return nil
	}
}

// WithMaxWait bounds how long work waits for other callers' work before its
// request is sent (default 5 ms; 0 sends at once whatever is queued).
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("max wait must not be negative, got %v", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithRetryPolicy sets the retry limits; zero fields keep their defaults.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *config) error {
		if p.MaxAttempts > 0 {
			c.retry.MaxAttempts = p.MaxAttempts
		}
		if p.BaseBackoff > 0 {
			c.retry.BaseBackoff = p.BaseBackoff
		}
		if p.MaxBackoff > 0 {
			c.retry.MaxBackoff = p.MaxBackoff
		}
		return nil
	}
}

// WithHealthPolicy marks an endpoint unhealthy after n consecutive failures
// (default 3) and probes its /healthz every interval (default 1 s).
func WithHealthPolicy(n int, interval time.Duration) Option {
	return func(c *config) error {
		if n <= 0 || interval <= 0 {
			return fmt.Errorf("health policy needs a positive failure count and probe interval, got %d and %v", n, interval)
		}
		c.unhealthyAfter, c.probeInterval = n, interval
		return nil
	}
}

// WithMaxInFlight bounds the requests in flight to n per endpoint (default
// 8). Work that finds every slot taken keeps coalescing until one frees, so
// batches grow under load instead of overloading the pods.
func WithMaxInFlight(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("max in flight must be positive, got %d", n)
		}
		c.inFlightPerEP = n
		return nil
	}
}

// WithInfoTTL sets how long Info answers are cached (default 30 s).
func WithInfoTTL(d time.Duration) Option {
	return func(c *config) error { c.infoTTL = d; return nil }
}

// WithRegisterer registers the client's metrics with reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) error { c.reg = reg; return nil }
}

// WithLogger sets the client's logger (default: no logs).
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error { c.log = l; return nil }
}

// WithResolver looks up the addresses of the names of dns+http:// and
// dns+https:// endpoints with lookup (default net.DefaultResolver.LookupHost).
func WithResolver(lookup func(ctx context.Context, host string) ([]string, error)) Option {
	return func(c *config) error {
		if lookup == nil {
			return fmt.Errorf("resolver must not be nil")
		}
		c.lookup = lookup
		return nil
	}
}

// WithResolveInterval sets how often the names of dns+ endpoints are
// looked up again (default 10 s).
func WithResolveInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("resolve interval must be positive, got %v", d)
		}
		c.resolveEvery = d
		return nil
	}
}

// WithMaxDiscovered bounds the addresses taken from dns+ endpoints
// (default 64): the request slots (WithMaxInFlight per endpoint) are
// sized for them.
func WithMaxDiscovered(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("max discovered endpoints must be positive, got %d", n)
		}
		c.maxDiscovered = n
		return nil
	}
}

// WithHealthCheck asks every endpoint's /healthz each interval (default
// 5 s; 0: only after request failures): an endpoint that fails it leaves
// the rotation at once and is probed until it passes.
func WithHealthCheck(interval time.Duration) Option {
	return func(c *config) error {
		if interval < 0 {
			return fmt.Errorf("health check interval must not be negative, got %v", interval)
		}
		c.healthInterval = interval
		return nil
	}
}
