package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorermetrics"
	"github.com/rs/zerolog"
)

// ErrClosed is returned by a Client's methods after Close.
var ErrClosed = errors.New("scorer client is closed")

// ErrUnavailable is wrapped by the error a Client returns when every attempt
// of a request failed (connection errors, timeouts, 5xx): a transient
// condition; back off and call again, do not dead-letter.
var ErrUnavailable = errors.New("scorer unavailable")

// Client is the scorer.Scorer that talks to scorer pods over
// creditflow.scorer/v1, with the guarantees of the package: results in
// order and exact, concurrent callers coalesced, failures retried on other
// endpoints, rejections to the caller at fault, contexts honoured. After
// UnhealthyAfter consecutive failures (WithHealthPolicy) an endpoint is
// skipped and its /healthz probed until it answers 200 and reports the same
// model.
type Client struct {
	cfg    config
	list   atomic.Pointer[[]*endpoint] // the endpoints work goes to (endpoints())
	listMu sync.Mutex                  // serialises changes of list
	static []*endpoint                 // the endpoints named by URL
	dns    []dnsTarget                 // the names followed (discover.go)
	// tlsNames maps a discovered https address ("IP:PORT") to the name it
	// was found under, which its certificate is checked against (dialTLS).
	tlsNames sync.Map
	resolved bool // the names were resolved once (under listMu)
	slotsMu  sync.Mutex
	// reserved are tokens of slots held to keep the requests in flight at
	// inFlightPerEP per endpoint while the endpoint count changes.
	reserved int
	hc       *http.Client
	metrics  *scorermetrics.Client
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	rr       atomic.Uint64
	scoreQ   chan *item
	attnQ    chan *item
	slots    chan struct{} // one per request in flight
	// answers holds answer bodies for reuse: decoding copies what it
	// keeps, so a body's buffer serves the next answer (readAnswer).
	answers sync.Pool

	infoLock chan struct{}
	info     scorer.ModelInfo
	infoAt   time.Time
	infoOK   bool

	stats struct {
		requests, retries, batches, items atomic.Int64
	}
}

// New talks to the scorer pods at endpoints ("http://host:port",
// "https://host:port", or "host:port"). It starts no connection; Close it
// when done.
func New(endpoints []string, opts ...Option) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("scorer client needs at least one endpoint")
	}
	cfg := config{
		requestTimeout: 30 * time.Second,
		budget:         DefaultTokenBudget,
		maxWait:        5 * time.Millisecond,
		retry:          RetryPolicy{MaxAttempts: 4, BaseBackoff: 20 * time.Millisecond, MaxBackoff: time.Second},
		unhealthyAfter: 3,
		probeInterval:  time.Second,
		inFlightPerEP:  8,
		infoTTL:        30 * time.Second,
		lookup:         net.DefaultResolver.LookupHost,
		resolveEvery:   10 * time.Second,
		maxDiscovered:  64,
		healthInterval: 5 * time.Second,
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
		metrics:  scorermetrics.NewClient(cfg.reg),
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
		if strings.HasPrefix(u, dnsPrefix) {
			d, err := parseDNSTarget(u)
			if err != nil {
				cancel()
				return nil, fmt.Errorf("scorer client: %w", err)
			}
			c.dns = append(c.dns, d)
			if d.scheme == "https" && tr.DialTLSContext == nil {
				tr.DialTLSContext = c.dialTLS(cfg.tlsConfig)
			}
			continue
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
		c.static = append(c.static, c.newEndpoint(u))
	}
	for _, op := range []string{"score", "attention"} {
		c.metrics.Retries.WithLabelValues(op)
	}
	maxEPs := len(c.static)
	if len(c.dns) > 0 {
		maxEPs += cfg.maxDiscovered
	}
	c.slots = make(chan struct{}, cfg.inFlightPerEP*maxEPs)
	c.reserved = cap(c.slots)
	for range c.reserved {
		c.slots <- struct{}{}
	}
	c.setEndpoints(c.static)
	if len(c.dns) > 0 {
		c.resolve() // the first answer before any work; later ones on a timer
		c.wg.Add(1)
		go c.follow()
	}
	if cfg.healthInterval > 0 {
		c.wg.Add(1)
		go c.watchHealth()
	}
	c.wg.Add(2)
	go c.batcher("score", c.scoreQ)
	go c.batcher("attention", c.attnQ)
	return c, nil
}

// newEndpoint is a healthy endpoint at u with its metric series.
func (c *Client) newEndpoint(u string) *endpoint {
	ep := &endpoint{url: u}
	ep.healthy.Store(true)
	c.metrics.Healthy.WithLabelValues(u).Set(1)
	// Every error and retry series exists from the start (at 0), so
	// rate() and the dashboard panels work before the first failure.
	for _, op := range []string{"score", "attention"} {
		for _, kind := range scorermetrics.ErrorKinds {
			c.metrics.Errors.WithLabelValues(u, op, kind)
		}
	}
	return ep
}

// endpoints are the endpoints work goes to now.
func (c *Client) endpoints() []*endpoint {
	if p := c.list.Load(); p != nil {
		return *p
	}
	return nil
}

// setEndpoints makes eps the endpoints work goes to, and the requests in
// flight at most inFlightPerEP for each.
func (c *Client) setEndpoints(eps []*endpoint) {
	c.list.Store(&eps)
	want := cap(c.slots) - c.cfg.inFlightPerEP*len(eps) // tokens to hold back
	c.slotsMu.Lock()
	defer c.slotsMu.Unlock()
	for ; c.reserved > want && c.reserved > 0; c.reserved-- {
		<-c.slots // a held-back token is in the channel: this never waits
	}
	if c.reserved < want {
		// Held back as requests in flight finish.
		n := want - c.reserved
		c.reserved = want
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for range n {
				select {
				case c.slots <- struct{}{}:
				case <-c.ctx.Done():
					return
				}
			}
		}()
	}
}

// Close stops the client: pending and later calls get ErrClosed.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	c.hc.CloseIdleConnections()
	return nil
}

// Stats are cumulative counts since the client started.
type Stats struct {
	Requests int64 // request attempts sent
	Retries  int64 // attempts after a failed one
	Batches  int64 // coalesced requests formed
	Items    int64 // caller work items coalesced into them
}

// Stats returns the client's cumulative counts.
func (c *Client) Stats() Stats {
	return Stats{
		Requests: c.stats.requests.Load(), Retries: c.stats.retries.Load(),
		Batches: c.stats.batches.Load(), Items: c.stats.items.Load(),
	}
}

// ScoreRows scores the sets on the scorer pods. A set of a statistic other
// than logprob needs pods that advertise protocol.FeatureStatistics (else
// ErrNoStatistics, before anything is sent). Its usage is zero: a request
// carries the sets of many calls, and the pods' usage goes into the
// client's metrics (creditflow_scorer_tokens_forwarded_total …).
func (c *Client) ScoreRows(ctx context.Context, sets []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	if len(sets) == 0 {
		return []scorer.RowScores{}, scorer.Usage{}, nil
	}
	for _, s := range sets {
		if !scorer.IsLogProb(s.Statistic) {
			if err := c.checkStatistics(ctx, s.Statistic); err != nil {
				return nil, scorer.Usage{}, err
			}
			break
		}
	}
	var items []*item
	var offsets []int
	cur := &item{ctx: ctx, done: make(chan itemResult, 1)}
	for i, s := range sets {
		t := s.TokenCount()
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
		return nil, scorer.Usage{}, shiftItem(err, items, offsets)
	}
	out := make([]scorer.RowScores, 0, len(sets))
	for _, r := range res {
		out = append(out, r.scores...)
	}
	return out, scorer.Usage{}, nil
}

// Attention computes the step graphs of the jobs on the scorer pods, with
// the policy version the pods said computed them (the oldest, when the jobs
// went out in several requests; -1 when a pod did not say). With opts.Lower
// it asks the pods for their lower-graphs answer (a quarter of the bytes of
// the K×K answer) and cuts a K×K answer itself where a pod gives no other,
// by the same rule.
func (c *Client) Attention(ctx context.Context, jobs []scorer.AttentionJob, opts scorer.AttentionOptions) (scorer.AttentionResult, error) {
	res, version, err := c.attention(ctx, jobs, opts.Lower)
	if err != nil {
		return scorer.AttentionResult{PolicyVersion: -1}, err
	}
	out := scorer.AttentionResult{PolicyVersion: version}
	if opts.Lower {
		out.Lower = make([][]scorer.LowerGraph, 0, len(jobs))
		for _, r := range res {
			out.Lower = append(out.Lower, r.lower...)
		}
		return out, nil
	}
	out.Graphs = make([][]scorer.StepGraph, 0, len(jobs))
	for _, r := range res {
		out.Graphs = append(out.Graphs, r.graphs...)
	}
	return out, nil
}

// attention sends jobs in items of at most the token budget and returns
// the items' results in order and the oldest policy version they report
// (-1 when one does not); lower asks for lower graphs.
func (c *Client) attention(ctx context.Context, jobs []scorer.AttentionJob, lower bool) ([]itemResult, int64, error) {
	if len(jobs) == 0 {
		return nil, -1, nil
	}
	var items []*item
	var offsets []int
	cur := &item{ctx: ctx, lower: lower, done: make(chan itemResult, 1)}
	for i, j := range jobs {
		t := len(j.Tokens)
		if len(cur.jobs) > 0 && cur.tokens+t > c.cfg.budget {
			items = append(items, cur)
			cur = &item{ctx: ctx, lower: lower, done: make(chan itemResult, 1)}
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
	version, known := int64(-1), true
	for i, r := range res {
		if r.version == nil {
			known = false
		} else if i == 0 || *r.version < version {
			version = *r.version
		}
	}
	if !known {
		version = -1
	}
	return res, version, nil
}

// shiftItem turns a rejection's item index within one chunk into the index
// within the caller's call.
func shiftItem(err error, items []*item, offsets []int) error {
	var rej *scorer.RejectedError
	if !errors.As(err, &rej) {
		return err
	}
	cp := *rej
	var chunk *item
	if r := (*rejection)(nil); errors.As(err, &r) {
		chunk = r.chunk
	}
	if cp.Item >= 0 {
		for k, it := range items {
			if chunk == it {
				cp.Item += offsets[k]
			}
		}
	}
	return &cp
}
