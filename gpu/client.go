package gpu

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// ErrClosed is returned by a Client's methods after Close.
var ErrClosed = errors.New("scorer client is closed")

// ErrUnavailable is wrapped by the error a Client returns when every attempt
// of a request failed (connection errors, timeouts, 5xx): a transient
// condition; back off and call again, do not dead-letter.
var ErrUnavailable = errors.New("scorer unavailable")

// Client is the Scorer that talks to scorer pods over creditflow.scorer/v1.
//
// Guarantees:
//   - Results are in the order of the inputs and equal what the pod computed
//     (floats travel in their shortest exact JSON form).
//   - Work from concurrent callers is coalesced into requests of at most the
//     token budget (a single set or job larger than the budget goes alone),
//     waiting at most MaxWait for company.
//   - A request goes to the healthy endpoint with the least tokens in flight.
//     A connection error, timeout, 5xx or 429 is retried on another endpoint
//     with exponential backoff and full jitter, up to the retry limit. 4xx are
//     never retried: a 400/413 reaches only the caller whose input caused it,
//     as a *RejectedError (others in the same request are resent without it);
//     401/403/version mismatches surface as *StatusError.
//   - A caller whose context ends gets ctx.Err() at once; a request whose
//     callers have all gone is cancelled.
//   - After UnhealthyAfter consecutive failures an endpoint is skipped and its
//     /healthz probed until it answers 200 (and reports the same model).
type Client struct {
	cfg     clientConfig
	eps     []*endpoint
	hc      *http.Client
	metrics *clientMetrics
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	rr      atomic.Uint64
	scoreQ  chan *item
	attnQ   chan *item
	slots   chan struct{} // one per request in flight

	infoLock chan struct{}
	info     ModelInfo
	infoAt   time.Time
	infoOK   bool

	stats struct {
		requests, retries, batches, items atomic.Int64
	}
}

// RetryPolicy bounds retries of failed requests.
type RetryPolicy struct {
	MaxAttempts int           // attempts per request, first included (default 4)
	BaseBackoff time.Duration // backoff before the first retry (default 20 ms), doubled each retry
	MaxBackoff  time.Duration // backoff cap (default 1 s); each wait is uniform in [0, backoff]
}

// ClientOption configures a Client.
type ClientOption func(*clientConfig) error

type clientConfig struct {
	tlsConfig      *tls.Config
	token          string
	requestTimeout time.Duration
	budget         int
	maxWait        time.Duration
	retry          RetryPolicy
	unhealthyAfter int
	probeInterval  time.Duration
	inFlightPerEP  int
	infoTTL        time.Duration
	reg            prometheus.Registerer
	log            zerolog.Logger
}

// WithTLSConfig uses cfg for https endpoints (endpoints without a scheme then default to https).
func WithTLSConfig(cfg *tls.Config) ClientOption {
	return func(c *clientConfig) error { c.tlsConfig = cfg.Clone(); return nil }
}

// WithCAFile trusts the PEM certificates in path for https endpoints
// (endpoints without a scheme then default to https).
func WithCAFile(path string) ClientOption {
	return func(c *clientConfig) error {
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

// WithBearerToken sends "Authorization: Bearer <token>" with every request.
func WithBearerToken(token string) ClientOption {
	return func(c *clientConfig) error { c.token = strings.TrimSpace(token); return nil }
}

// WithRequestTimeout bounds one attempt of one request (default 30 s); a
// timed-out attempt is retried on another endpoint.
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) error {
		if d <= 0 {
			return fmt.Errorf("request timeout must be positive, got %v", d)
		}
		c.requestTimeout = d
		return nil
	}
}

// WithTokenBudget bounds the tokens of a coalesced request (default 32,768).
func WithTokenBudget(tokens int) ClientOption {
	return func(c *clientConfig) error {
		if tokens <= 0 {
			return fmt.Errorf("token budget must be positive, got %d", tokens)
		}
		c.budget = tokens
		return nil
	}
}

// WithMaxWait bounds how long work waits for other callers' work before its
// request is sent (default 5 ms; 0 sends at once whatever is queued).
func WithMaxWait(d time.Duration) ClientOption {
	return func(c *clientConfig) error {
		if d < 0 {
			return fmt.Errorf("max wait must not be negative, got %v", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithRetryPolicy sets the retry limits; zero fields keep their defaults.
func WithRetryPolicy(p RetryPolicy) ClientOption {
	return func(c *clientConfig) error {
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
func WithHealthPolicy(n int, interval time.Duration) ClientOption {
	return func(c *clientConfig) error {
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
func WithMaxInFlight(n int) ClientOption {
	return func(c *clientConfig) error {
		if n <= 0 {
			return fmt.Errorf("max in flight must be positive, got %d", n)
		}
		c.inFlightPerEP = n
		return nil
	}
}

// WithInfoTTL sets how long Info answers are cached (default 30 s).
func WithInfoTTL(d time.Duration) ClientOption {
	return func(c *clientConfig) error { c.infoTTL = d; return nil }
}

// WithRegisterer registers the client's metrics with reg.
func WithRegisterer(reg prometheus.Registerer) ClientOption {
	return func(c *clientConfig) error { c.reg = reg; return nil }
}

// WithLogger sets the client's logger (default: no logs).
func WithLogger(l zerolog.Logger) ClientOption {
	return func(c *clientConfig) error { c.log = l; return nil }
}

type endpoint struct {
	url         string
	outstanding atomic.Int64 // tokens in flight
	healthy     atomic.Bool
	mu          sync.Mutex
	fails       int
	probing     bool
}

// errorKinds are the kind label values of creditflow_scorer_errors_total.
var errorKinds = []string{"connection", "timeout", "server", "rejected", "status", "protocol"}

type clientMetrics struct {
	duration  *prometheus.HistogramVec
	fill      *prometheus.HistogramVec
	callers   *prometheus.HistogramVec
	requests  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	inFlight  *prometheus.GaugeVec
	healthy   *prometheus.GaugeVec
	forwarded prometheus.Counter
	rowByRow  prometheus.Counter
	truncs    prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_request_duration_seconds",
			Help:    "Duration of one scorer request attempt, by endpoint and op.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"endpoint", "op"}),
		fill: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_fill_ratio",
			Help:    "Tokens of a coalesced request divided by the token budget, by op.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		}, []string{"op"}),
		callers: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "creditflow_scorer_batch_callers",
			Help:    "Caller work items coalesced into one request, by op.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}, []string{"op"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_requests_total",
			Help: "Scorer request attempts, by endpoint and op.",
		}, []string{"endpoint", "op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_retries_total",
			Help: "Scorer requests retried after a failed attempt, by op.",
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "creditflow_scorer_errors_total",
			Help: "Failed scorer request attempts, by endpoint, op and kind (connection, timeout, server, rejected, status, protocol).",
		}, []string{"endpoint", "op", "kind"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_in_flight_requests",
			Help: "Scorer requests in flight, by endpoint.",
		}, []string{"endpoint"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "creditflow_scorer_endpoint_healthy",
			Help: "1 when the client sends work to the endpoint, 0 while it is probed after failures.",
		}, []string{"endpoint"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_forwarded_total",
			Help: "Tokens the scorers reported forwarding through the model (with prefix sharing).",
		}),
		rowByRow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_tokens_row_by_row_total",
			Help: "Tokens a row-by-row computation would have forwarded for the same rows.",
		}),
		truncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "creditflow_scorer_truncations_total",
			Help: "Rows the scorers cut from the left to fit the model's max context.",
		}),
	}
	if reg != nil {
		m.duration = shared(reg, m.duration)
		m.fill = shared(reg, m.fill)
		m.callers = shared(reg, m.callers)
		m.requests = shared(reg, m.requests)
		m.retries = shared(reg, m.retries)
		m.errors = shared(reg, m.errors)
		m.inFlight = shared(reg, m.inFlight)
		m.healthy = shared(reg, m.healthy)
		m.forwarded = shared(reg, m.forwarded)
		m.rowByRow = shared(reg, m.rowByRow)
		m.truncs = shared(reg, m.truncs)
	}
	return m
}

// NewClient talks to the scorer pods at endpoints ("http://host:port",
// "https://host:port", or "host:port"). It starts no connection; Close it
// when done.
func NewClient(endpoints []string, opts ...ClientOption) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("scorer client needs at least one endpoint")
	}
	cfg := clientConfig{
		requestTimeout: 30 * time.Second,
		budget:         32768,
		maxWait:        5 * time.Millisecond,
		retry:          RetryPolicy{MaxAttempts: 4, BaseBackoff: 20 * time.Millisecond, MaxBackoff: time.Second},
		unhealthyAfter: 3,
		probeInterval:  time.Second,
		inFlightPerEP:  8,
		infoTTL:        30 * time.Second,
		log:            zerolog.Nop(),
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("scorer client: %w", err)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.TLSClientConfig = cfg.tlsConfig
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:      cfg,
		hc:       &http.Client{Transport: tr},
		metrics:  newClientMetrics(cfg.reg),
		ctx:      ctx,
		cancel:   cancel,
		scoreQ:   make(chan *item),
		attnQ:    make(chan *item),
		infoLock: make(chan struct{}, 1),
	}
	seen := map[string]bool{}
	for _, e := range endpoints {
		u := strings.TrimRight(strings.TrimSpace(e), "/")
		if u == "" {
			cancel()
			return nil, errors.New("scorer client: empty endpoint in the list")
		}
		if !strings.Contains(u, "://") {
			if cfg.tlsConfig != nil {
				u = "https://" + u
			} else {
				u = "http://" + u
			}
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			cancel()
			return nil, fmt.Errorf("scorer client: endpoint %q must be http:// or https://", e)
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		ep := &endpoint{url: u}
		ep.healthy.Store(true)
		c.metrics.healthy.WithLabelValues(u).Set(1)
		// Every error and retry series exists from the start (at 0), so
		// rate() and the dashboard panels work before the first failure.
		for _, op := range []string{"score", "attention"} {
			for _, kind := range errorKinds {
				c.metrics.errors.WithLabelValues(u, op, kind)
			}
		}
		c.eps = append(c.eps, ep)
	}
	for _, op := range []string{"score", "attention"} {
		c.metrics.retries.WithLabelValues(op)
	}
	c.slots = make(chan struct{}, cfg.inFlightPerEP*len(c.eps))
	c.wg.Add(2)
	go c.batcher("score", c.scoreQ)
	go c.batcher("attention", c.attnQ)
	return c, nil
}

// Close stops the client: pending and later calls get ErrClosed.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	c.hc.CloseIdleConnections()
	return nil
}

// ClientStats are cumulative counts since the client started.
type ClientStats struct {
	Requests int64 // request attempts sent
	Retries  int64 // attempts after a failed one
	Batches  int64 // coalesced requests formed
	Items    int64 // caller work items coalesced into them
}

// Stats returns the client's cumulative counts.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Requests: c.stats.requests.Load(), Retries: c.stats.retries.Load(),
		Batches: c.stats.batches.Load(), Items: c.stats.items.Load(),
	}
}

// item is one caller's chunk of work waiting in a batcher.
type item struct {
	ctx    context.Context
	tokens int
	sets   []RowSet
	jobs   []AttentionJob
	done   chan itemResult // buffered 1
}

type itemResult struct {
	scores  []RowScores
	graphs  [][]StepGraph
	version *int64 // attention: the policy version the pod reported
	err     error
}

func (it *item) units() int { return max(len(it.sets), len(it.jobs)) }

func (it *item) finish(r itemResult) {
	select {
	case it.done <- r:
	default:
	}
}

// batcher coalesces items into requests of at most the token budget. A
// batch is sent when it reaches the budget, or when MaxWait has passed since
// its first item and a request slot is free; while no slot is free it keeps
// growing.
func (c *Client) batcher(op string, in chan *item) {
	defer c.wg.Done()
	var (
		batch  []*item
		tokens int
		timer  *time.Timer
		timerC <-chan time.Time
		slotC  chan struct{} // c.slots while the batch is due, else nil
	)
	// flush sends the batch; held says whether a slot is already taken.
	flush := func(held bool) {
		if timer != nil {
			timer.Stop()
		}
		timerC, slotC = nil, nil
		if len(batch) == 0 {
			if held {
				<-c.slots
			}
			return
		}
		b, t := batch, tokens
		batch, tokens = nil, 0
		c.stats.batches.Add(1)
		c.stats.items.Add(int64(len(b)))
		c.metrics.fill.WithLabelValues(op).Observe(float64(t) / float64(c.cfg.budget))
		c.metrics.callers.WithLabelValues(op).Observe(float64(len(b)))
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if !held {
				select {
				case c.slots <- struct{}{}:
				case <-c.ctx.Done():
					for _, it := range b {
						it.finish(itemResult{err: ErrClosed})
					}
					return
				}
			}
			defer func() { <-c.slots }()
			c.send(op, b)
		}()
	}
	for {
		select {
		case it := <-in:
			if len(batch) > 0 && tokens+it.tokens > c.cfg.budget {
				flush(false)
			}
			batch = append(batch, it)
			tokens += it.tokens
			switch {
			case tokens >= c.cfg.budget:
				flush(false)
			case c.cfg.maxWait == 0:
				slotC = c.slots
			case timerC == nil && slotC == nil:
				if timer == nil {
					timer = time.NewTimer(c.cfg.maxWait)
				} else {
					timer.Reset(c.cfg.maxWait)
				}
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			slotC = c.slots
		case slotC <- struct{}{}:
			flush(true)
		case <-c.ctx.Done():
			for _, it := range batch {
				it.finish(itemResult{err: ErrClosed})
			}
			return
		}
	}
}

// submit queues items and waits for all of them.
func (c *Client) submit(ctx context.Context, q chan *item, items []*item) ([]itemResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, it := range items {
		select {
		case q <- it:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	out := make([]itemResult, len(items))
	for i, it := range items {
		select {
		case r := <-it.done:
			if r.err != nil {
				return nil, r.err
			}
			out[i] = r
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	return out, nil
}

// ScoreRows scores the sets on the scorer pods.
func (c *Client) ScoreRows(ctx context.Context, sets []RowSet) ([]RowScores, error) {
	if len(sets) == 0 {
		return []RowScores{}, nil
	}
	var items []*item
	var offsets []int
	cur := &item{ctx: ctx, done: make(chan itemResult, 1)}
	for i, s := range sets {
		t := rowsTokens(s)
		if len(cur.sets) > 0 && cur.tokens+t > c.cfg.budget {
			items = append(items, cur)
			cur = &item{ctx: ctx, done: make(chan itemResult, 1)}
		}
		if len(cur.sets) == 0 {
			offsets = append(offsets, i)
		}
		cur.sets = append(cur.sets, s)
		cur.tokens += t
	}
	items = append(items, cur)
	res, err := c.submit(ctx, c.scoreQ, items)
	if err != nil {
		return nil, shiftItem(err, items, offsets)
	}
	out := make([]RowScores, 0, len(sets))
	for _, r := range res {
		out = append(out, r.scores...)
	}
	return out, nil
}

// Attention computes the step graphs of the jobs on the scorer pods.
func (c *Client) Attention(ctx context.Context, jobs []AttentionJob) ([][]StepGraph, error) {
	out, _, err := c.AttentionVersion(ctx, jobs)
	return out, err
}

// AttentionVersion is Attention that also reports the policy version the
// pods said computed the graphs (the oldest, when the jobs went out in
// several requests), or -1 when a pod did not say.
func (c *Client) AttentionVersion(ctx context.Context, jobs []AttentionJob) ([][]StepGraph, int64, error) {
	if len(jobs) == 0 {
		return [][]StepGraph{}, -1, nil
	}
	var items []*item
	var offsets []int
	cur := &item{ctx: ctx, done: make(chan itemResult, 1)}
	for i, j := range jobs {
		t := len(j.Tokens)
		if len(cur.jobs) > 0 && cur.tokens+t > c.cfg.budget {
			items = append(items, cur)
			cur = &item{ctx: ctx, done: make(chan itemResult, 1)}
		}
		if len(cur.jobs) == 0 {
			offsets = append(offsets, i)
		}
		cur.jobs = append(cur.jobs, j)
		cur.tokens += t
	}
	items = append(items, cur)
	res, err := c.submit(ctx, c.attnQ, items)
	if err != nil {
		return nil, -1, shiftItem(err, items, offsets)
	}
	out := make([][]StepGraph, 0, len(jobs))
	version, known := int64(-1), true
	for i, r := range res {
		out = append(out, r.graphs...)
		if r.version == nil {
			known = false
		} else if i == 0 || *r.version < version {
			version = *r.version
		}
	}
	if !known {
		version = -1
	}
	return out, version, nil
}

// shiftItem turns a rejection's item index within one chunk into the index
// within the caller's call.
func shiftItem(err error, items []*item, offsets []int) error {
	var rej *RejectedError
	if !errors.As(err, &rej) {
		return err
	}
	cp := *rej
	cp.chunk = nil
	if cp.Item >= 0 {
		for k, it := range items {
			if rej.chunk == it {
				cp.Item += offsets[k]
			}
		}
	}
	return &cp
}

// pick chooses the endpoint with the least tokens in flight, preferring
// healthy endpoints not yet tried for this request.
func (c *Client) pick(tried map[*endpoint]bool) *endpoint {
	n := len(c.eps)
	start := int(c.rr.Add(1) % uint64(n))
	for pass := 0; pass < 4; pass++ {
		var best *endpoint
		var bestLoad int64
		for k := 0; k < n; k++ {
			ep := c.eps[(start+k)%n]
			if pass < 2 && !ep.healthy.Load() {
				continue
			}
			if (pass == 0 || pass == 2) && tried[ep] {
				continue
			}
			load := ep.outstanding.Load()
			if best == nil || load < bestLoad {
				best, bestLoad = ep, load
			}
		}
		if best != nil {
			return best
		}
	}
	return c.eps[start]
}

// attemptError classifies a failed attempt.
type attemptError struct {
	kind      string // connection, timeout, server, rejected, status, protocol
	retryable bool
	err       error
	body      ErrorBody
	status    int
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// send runs one coalesced request with retries and delivers the results.
func (c *Client) send(op string, items []*item) {
	live := items[:0:0]
	for _, it := range items {
		if it.ctx.Err() == nil {
			live = append(live, it)
		} else {
			it.finish(itemResult{err: it.ctx.Err()})
		}
	}
	items = live
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var remaining atomic.Int64
	remaining.Store(int64(len(items)))
	for _, it := range items {
		stop := context.AfterFunc(it.ctx, func() {
			if remaining.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}

	body, tokens, err := c.encode(op, items)
	if err != nil {
		for _, it := range items {
			it.finish(itemResult{err: err})
		}
		return
	}
	tried := map[*endpoint]bool{}
	var last *attemptError
	for attempt := 0; attempt < c.cfg.retry.MaxAttempts; attempt++ {
		if attempt > 0 {
			c.stats.retries.Add(1)
			c.metrics.retries.WithLabelValues(op).Inc()
			if !sleepCtx(ctx, c.backoff(attempt)) {
				break
			}
		}
		ep := c.pick(tried)
		tried[ep] = true
		raw, aerr := c.attempt(ctx, ep, op, body, tokens)
		if aerr == nil {
			if derr := c.deliver(op, items, raw); derr != nil {
				aerr = &attemptError{kind: "protocol", retryable: true, err: fmt.Errorf("scorer %s: %w", ep.url, derr)}
			} else {
				c.markSuccess(ep)
				return
			}
		}
		c.metrics.errors.WithLabelValues(ep.url, op, aerr.kind).Inc()
		if ctx.Err() != nil {
			break
		}
		if !aerr.retryable {
			c.refuse(op, items, ep, aerr)
			return
		}
		last = aerr
		c.markFailure(ep, aerr)
	}
	var final error
	switch {
	case c.ctx.Err() != nil:
		final = ErrClosed
	case ctx.Err() != nil:
		final = context.Canceled // every caller has gone; they already returned
	default:
		final = fmt.Errorf("%w: %s request failed after %d attempts over %d endpoints: %w", ErrUnavailable, op, c.cfg.retry.MaxAttempts, len(tried), last)
	}
	for _, it := range items {
		if err := it.ctx.Err(); err != nil {
			it.finish(itemResult{err: err})
		} else {
			it.finish(itemResult{err: final})
		}
	}
}

// refuse handles a non-retryable answer: a rejection reaches only the
// callers whose input caused it; the rest is resent.
func (c *Client) refuse(op string, items []*item, ep *endpoint, aerr *attemptError) {
	if aerr.kind != "rejected" {
		for _, it := range items {
			it.finish(itemResult{err: aerr.err})
		}
		return
	}
	if len(items) == 1 && aerr.status == http.StatusRequestEntityTooLarge && items[0].units() > 1 {
		c.splitItem(op, items[0])
		return
	}
	if len(items) == 1 {
		rej := &RejectedError{Code: aerr.body.Code, Message: aerr.body.Error, ID: aerr.body.ID, Endpoint: ep.url, Item: -1, chunk: items[0]}
		if rej.Code == "" {
			rej.Code = CodeBadRequest
		}
		if aerr.body.Item != nil {
			rej.Item = *aerr.body.Item
		} else if items[0].units() == 1 {
			// The request held one set or job: that is the one at fault.
			rej.Item = 0
			if len(items[0].sets) == 1 {
				rej.ID = items[0].sets[0].ID
			} else {
				rej.ID = items[0].jobs[0].ID
			}
		}
		items[0].finish(itemResult{err: rej})
		return
	}
	// Several callers: find the culprit from the item index, else split.
	if aerr.body.Item != nil && aerr.status == http.StatusBadRequest {
		idx := *aerr.body.Item
		for k, it := range items {
			if idx < it.units() {
				rej := &RejectedError{Code: CodeBadRequest, Message: aerr.body.Error, ID: aerr.body.ID, Endpoint: ep.url, Item: idx, chunk: it}
				it.finish(itemResult{err: rej})
				rest := slices.Concat(items[:k], items[k+1:])
				c.send(op, rest)
				return
			}
			idx -= it.units()
		}
	}
	half := len(items) / 2
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.send(op, items[:half]) }()
	go func() { defer wg.Done(); c.send(op, items[half:]) }()
	wg.Wait()
}

// splitItem sends the two halves of one caller's work separately (after a
// 413) and hands the caller the joined results, or the first error.
func (c *Client) splitItem(op string, it *item) {
	half := it.units() / 2
	parts := [2]*item{
		{ctx: it.ctx, done: make(chan itemResult, 1)},
		{ctx: it.ctx, done: make(chan itemResult, 1)},
	}
	if op == "score" {
		parts[0].sets, parts[1].sets = it.sets[:half], it.sets[half:]
	} else {
		parts[0].jobs, parts[1].jobs = it.jobs[:half], it.jobs[half:]
	}
	for _, p := range parts {
		for _, s := range p.sets {
			p.tokens += rowsTokens(s)
		}
		for _, j := range p.jobs {
			p.tokens += len(j.Tokens)
		}
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() { defer wg.Done(); c.send(op, []*item{p}) }()
	}
	wg.Wait()
	var joined itemResult
	for k, p := range parts {
		r := <-p.done
		if r.err != nil {
			var rej *RejectedError
			if errors.As(r.err, &rej) && rej.chunk == p {
				cp := *rej
				cp.chunk = it
				if cp.Item >= 0 {
					cp.Item += k * half
				}
				r.err = &cp
			}
			it.finish(itemResult{err: r.err})
			return
		}
		joined.scores = append(joined.scores, r.scores...)
		joined.graphs = append(joined.graphs, r.graphs...)
	}
	it.finish(joined)
}

func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.retry.BaseBackoff << (attempt - 1)
	if d > c.cfg.retry.MaxBackoff || d <= 0 {
		d = c.cfg.retry.MaxBackoff
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Client) encode(op string, items []*item) ([]byte, int, error) {
	tokens := 0
	for _, it := range items {
		tokens += it.tokens
	}
	var v any
	switch op {
	case "score":
		var sets []RowSet
		for _, it := range items {
			sets = append(sets, it.sets...)
		}
		b, err := appendScoreRequest(make([]byte, 0, 64+6*tokens), sets)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding scorer %s request: %w", op, err)
		}
		return b, tokens, nil
	default:
		var jobs []AttentionJob
		for _, it := range items {
			jobs = append(jobs, it.jobs...)
		}
		v = jobsToWire(jobs)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding scorer %s request: %w", op, err)
	}
	return b, tokens, nil
}

func (c *Client) newRequest(ctx context.Context, method, url string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set(ProtocolHeader, ProtocolVersion)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.token)
	}
	return req, nil
}

// attempt sends one request to ep and returns the 200 body.
func (c *Client) attempt(ctx context.Context, ep *endpoint, op string, body []byte, tokens int) ([]byte, *attemptError) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	path := PathScore
	if op == "attention" {
		path = PathAttention
	}
	req, err := c.newRequest(actx, http.MethodPost, ep.url+path, body)
	if err != nil {
		return nil, &attemptError{kind: "protocol", err: fmt.Errorf("scorer %s: building request: %w", ep.url, err)}
	}
	ep.outstanding.Add(int64(tokens))
	c.metrics.inFlight.WithLabelValues(ep.url).Inc()
	c.stats.requests.Add(1)
	c.metrics.requests.WithLabelValues(ep.url, op).Inc()
	start := time.Now()
	defer func() {
		ep.outstanding.Add(-int64(tokens))
		c.metrics.inFlight.WithLabelValues(ep.url).Dec()
		c.metrics.duration.WithLabelValues(ep.url, op).Observe(time.Since(start).Seconds())
	}()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, classifyTransport(ctx, actx, ep, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, classifyTransport(ctx, actx, ep, err)
	}
	if resp.StatusCode == http.StatusOK {
		if v := resp.Header.Get(ProtocolHeader); v != "" && v != ProtocolVersion {
			return nil, &attemptError{kind: "status", status: resp.StatusCode, err: &StatusError{Endpoint: ep.url, Status: resp.StatusCode, Code: CodeVersionMismatch,
				Message: fmt.Sprintf("scorer answers with protocol %q, client speaks %q", v, ProtocolVersion)}}
		}
		return data, nil
	}
	return nil, classifyStatus(ep, resp.StatusCode, data)
}

func classifyTransport(ctx, actx context.Context, ep *endpoint, err error) *attemptError {
	if ctx.Err() == nil && actx.Err() != nil {
		return &attemptError{kind: "timeout", retryable: true, err: fmt.Errorf("scorer %s: request timed out: %w", ep.url, err)}
	}
	return &attemptError{kind: "connection", retryable: true, err: fmt.Errorf("scorer %s: %w", ep.url, err)}
}

func classifyStatus(ep *endpoint, status int, data []byte) *attemptError {
	var body ErrorBody
	if json.Unmarshal(data, &body) != nil || body.Error == "" {
		body = ErrorBody{Error: strings.TrimSpace(string(data[:min(len(data), 512)]))}
	}
	switch {
	case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
		return &attemptError{kind: "server", retryable: true, status: status, body: body,
			err: fmt.Errorf("scorer %s answered %d %s: %s", ep.url, status, body.Code, body.Error)}
	case (status == http.StatusBadRequest && body.Code != CodeVersionMismatch) || status == http.StatusRequestEntityTooLarge:
		if status == http.StatusRequestEntityTooLarge {
			body.Code = CodeTooLarge
		}
		return &attemptError{kind: "rejected", status: status, body: body,
			err: &RejectedError{Code: body.Code, Message: body.Error, ID: body.ID, Endpoint: ep.url, Item: -1}}
	default:
		return &attemptError{kind: "status", status: status, body: body,
			err: &StatusError{Endpoint: ep.url, Status: status, Code: body.Code, Message: body.Error}}
	}
}

// deliver decodes a 200 body and hands each item its results.
func (c *Client) deliver(op string, items []*item, data []byte) error {
	switch op {
	case "score":
		var resp ScoreResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			return fmt.Errorf("undecodable score response: %w", err)
		}
		n := 0
		for _, it := range items {
			n += len(it.sets)
		}
		if len(resp.Results) != n {
			return fmt.Errorf("score response holds %d results for %d sets", len(resp.Results), n)
		}
		k := 0
		outs := make([][]RowScores, len(items))
		for i, it := range items {
			outs[i] = make([]RowScores, len(it.sets))
			for j, s := range it.sets {
				w := resp.Results[k]
				if len(w.Scores) != len(s.Rows) {
					return fmt.Errorf("score response set %d holds %d scores for %d rows", k, len(w.Scores), len(s.Rows))
				}
				outs[i][j] = scoresFromWire(w)
				outs[i][j].PolicyVersion = resp.PolicyVersion
				k++
			}
		}
		c.metrics.forwarded.Add(float64(resp.Usage.TokensForwarded))
		c.metrics.rowByRow.Add(float64(resp.Usage.TokensRowByRow))
		c.metrics.truncs.Add(float64(resp.Usage.Truncations))
		for i, it := range items {
			it.finish(itemResult{scores: outs[i]})
		}
	default:
		var resp AttentionResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			return fmt.Errorf("undecodable attention response: %w", err)
		}
		n := 0
		for _, it := range items {
			n += len(it.jobs)
		}
		if len(resp.Results) != n {
			return fmt.Errorf("attention response holds %d results for %d jobs", len(resp.Results), n)
		}
		k := 0
		outs := make([][][]StepGraph, len(items))
		for i, it := range items {
			outs[i] = make([][]StepGraph, len(it.jobs))
			for j, jb := range it.jobs {
				g := graphsFromWire(resp.Results[k])
				if len(g) != len(jb.Layers) {
					return fmt.Errorf("attention response job %d holds %d graphs for %d layers", k, len(g), len(jb.Layers))
				}
				K := len(jb.Steps)
				for _, sg := range g {
					if len(sg.AA) != K || len(sg.AO) != K {
						return fmt.Errorf("attention response job %d layer %d is not %d×%d", k, sg.Layer, K, K)
					}
				}
				outs[i][j] = g
				k++
			}
		}
		for i, it := range items {
			it.finish(itemResult{graphs: outs[i], version: resp.PolicyVersion})
		}
	}
	return nil
}

func (c *Client) markSuccess(ep *endpoint) {
	ep.mu.Lock()
	ep.fails = 0
	ep.mu.Unlock()
}

func (c *Client) markFailure(ep *endpoint, aerr *attemptError) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.fails++
	if ep.fails < c.cfg.unhealthyAfter || !ep.healthy.Load() {
		return
	}
	ep.healthy.Store(false)
	c.metrics.healthy.WithLabelValues(ep.url).Set(0)
	c.cfg.log.Warn().Str("endpoint", ep.url).Int("failures", ep.fails).Str("error", aerr.Error()).
		Msg("scorer endpoint marked unhealthy; probing /healthz")
	if !ep.probing {
		ep.probing = true
		c.wg.Add(1)
		go c.probe(ep)
	}
}

// probe polls ep's /healthz until it answers 200 and, when the model is
// known, reports the same model; then ep takes work again.
func (c *Client) probe(ep *endpoint) {
	defer c.wg.Done()
	for {
		if !sleepCtx(c.ctx, c.cfg.probeInterval) {
			return
		}
		if err := c.check(ep); err != nil {
			c.cfg.log.Debug().Str("endpoint", ep.url).Str("error", err.Error()).Msg("scorer endpoint still unhealthy")
			continue
		}
		ep.mu.Lock()
		ep.fails = 0
		ep.probing = false
		ep.healthy.Store(true)
		ep.mu.Unlock()
		c.metrics.healthy.WithLabelValues(ep.url).Set(1)
		c.cfg.log.Info().Str("endpoint", ep.url).Msg("scorer endpoint healthy again")
		return
	}
}

func (c *Client) check(ep *endpoint) error {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.requestTimeout, 5*time.Second))
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, ep.url+PathHealth, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %d", resp.StatusCode)
	}
	select {
	case c.infoLock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	known, ref := c.infoOK, c.info
	c.unlockInfo()
	if !known {
		return nil
	}
	got, err := c.fetchInfo(ctx, ep)
	if err != nil {
		return err
	}
	if !sameModel(ref, got) {
		return fmt.Errorf("endpoint now serves model %q (%s, %d layers), not %q", got.Name, got.Architecture, got.Layers, ref.Name)
	}
	return nil
}

func (c *Client) unlockInfo() { <-c.infoLock }

func (c *Client) fetchInfo(ctx context.Context, ep *endpoint) (ModelInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, ep.url+PathInfo, nil)
	if err != nil {
		return ModelInfo{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: %w", ep.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: reading info: %w", ep.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return ModelInfo{}, classifyStatus(ep, resp.StatusCode, data).err
	}
	var info ModelInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return ModelInfo{}, fmt.Errorf("scorer %s: undecodable info: %w", ep.url, err)
	}
	if info.Protocol != ProtocolVersion {
		return ModelInfo{}, &StatusError{Endpoint: ep.url, Status: resp.StatusCode, Code: CodeVersionMismatch,
			Message: fmt.Sprintf("scorer speaks protocol %q, client speaks %q", info.Protocol, ProtocolVersion)}
	}
	return info, nil
}

func sameModel(a, b ModelInfo) bool {
	return a.Name == b.Name && a.Architecture == b.Architecture && a.Layers == b.Layers &&
		a.VocabSize == b.VocabSize && a.MaxContext == b.MaxContext && slices.Equal(a.PlaceholderIDs, b.PlaceholderIDs)
}

// Info asks every endpoint for its model and returns it; all reachable
// endpoints must serve the same model (name, architecture, layers, vocab,
// max context, placeholder ids), else it is an error. The answer is cached
// for the info TTL. PolicyVersion is the highest any endpoint reports.
func (c *Client) Info(ctx context.Context) (ModelInfo, error) {
	select {
	case c.infoLock <- struct{}{}:
	case <-ctx.Done():
		return ModelInfo{}, ctx.Err()
	case <-c.ctx.Done():
		return ModelInfo{}, ErrClosed
	}
	defer c.unlockInfo()
	if c.infoOK && (c.cfg.infoTTL <= 0 || time.Since(c.infoAt) < c.cfg.infoTTL) {
		return c.info, nil
	}
	type answer struct {
		info ModelInfo
		err  error
	}
	answers := make([]answer, len(c.eps))
	var wg sync.WaitGroup
	for i, ep := range c.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.fetchInfo(ctx, ep)
			answers[i] = answer{info, err}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return ModelInfo{}, err
	}
	var ref *ModelInfo
	var refURL string
	var errs []error
	for i, a := range answers {
		if a.err != nil {
			var se *StatusError
			if errors.As(a.err, &se) {
				return ModelInfo{}, a.err
			}
			errs = append(errs, a.err)
			c.cfg.log.Warn().Str("endpoint", c.eps[i].url).Str("error", a.err.Error()).Msg("scorer info unavailable")
			continue
		}
		if ref == nil {
			info := a.info
			ref, refURL = &info, c.eps[i].url
			continue
		}
		if !sameModel(*ref, a.info) {
			return ModelInfo{}, fmt.Errorf("scorer endpoints serve different models: %s has %q (%s, %d layers, vocab %d, max context %d), %s has %q (%s, %d layers, vocab %d, max context %d); point the client at pods of one model",
				refURL, ref.Name, ref.Architecture, ref.Layers, ref.VocabSize, ref.MaxContext,
				c.eps[i].url, a.info.Name, a.info.Architecture, a.info.Layers, a.info.VocabSize, a.info.MaxContext)
		}
		ref.PolicyVersion = max(ref.PolicyVersion, a.info.PolicyVersion)
	}
	if ref == nil {
		return ModelInfo{}, fmt.Errorf("no scorer endpoint answered %s: %w", PathInfo, errors.Join(errs...))
	}
	c.info, c.infoAt, c.infoOK = *ref, time.Now(), true
	return *ref, nil
}
