package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/tokenizer"
)

// Monitor reads samples topics and the dead-letter topic into an
// Aggregator and serves them.
type Monitor struct {
	src Source
	cfg Config
	agg *Aggregator
	log zerolog.Logger
	reg *prometheus.Registry
	dec *tokenizer.Decoder // token text of the sample view
}

// Option configures New.
type Option func(*Monitor)

// WithLogger sets the logger (default: none).
func WithLogger(l zerolog.Logger) Option { return func(m *Monitor) { m.log = l } }

// New checks the source and configuration and returns a monitor that has
// read nothing yet.
func New(src Source, cfg Config, opts ...Option) (*Monitor, error) {
	if err := src.Check(); err != nil {
		return nil, err
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	m := &Monitor{src: src, cfg: cfg, agg: NewAggregator(cfg, src.Topics...), log: zerolog.Nop(), dec: tokenizer.Bytes()}
	for _, o := range opts {
		o(m)
	}
	m.reg = newRegistry(m.agg)
	return m, nil
}

// Aggregator is the monitor's aggregate state.
func (m *Monitor) Aggregator() *Aggregator { return m.agg }

// Registerer is the registry the monitor's /metrics serves, for series
// of the process next to the monitor's (the consumer groups' lag).
func (m *Monitor) Registerer() prometheus.Registerer { return m.reg }

func (m *Monitor) reader() (*reader, error) {
	from, err := parseFrom(m.src.From)
	if err != nil {
		return nil, err
	}
	d, err := m.src.Security.Dialer()
	if err != nil {
		return nil, err
	}
	return &reader{src: m.src, agg: m.agg, log: m.log, from: from, d: d}, nil
}

// Once reads every topic up to its end offset as of the call, closes every
// group still open and returns the summary.
func (m *Monitor) Once(ctx context.Context) (Summary, error) {
	r, err := m.reader()
	if err != nil {
		return Summary{}, err
	}
	if m.src.Policy != "" { // announcements first: lags are measured from them
		fctx, cancel := context.WithCancel(ctx)
		f := m.follower()
		done := make(chan struct{})
		go func() { defer close(done); _ = f.Run(fctx) }()
		ready := f.WaitReady(ctx, 15*time.Second)
		cancel()
		<-done
		if !ready {
			return Summary{}, fmt.Errorf("monitor: policy topic %s not readable within 15s: check --topic-policy and the brokers, or set --topic-policy '' to leave it out", m.src.Policy)
		}
	}
	if err := r.once(ctx); err != nil {
		return Summary{}, err
	}
	return m.agg.Summary(), nil
}

// Follow reads the topics until ctx ends, closing idle partial groups as it
// goes. It returns nil when ctx ends.
func (m *Monitor) Follow(ctx context.Context) error {
	r, err := m.reader()
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.agg.Sweep()
			}
		}
	}()
	if m.src.Policy != "" {
		go func() { _ = m.follower().Run(ctx) }()
	}
	if err := r.follow(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (m *Monitor) follower() *policy.Follower {
	return policy.NewFollower(m.src.Brokers, m.src.Security, m.src.Policy, policy.WithLogger(m.log),
		policy.WithOnNewest(func(a schemas.PolicyAnnouncement) { m.agg.SetAnnounced(a.Version) }))
}

// Serve serves Handler on ln until ctx ends.
func (m *Monitor) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close() // event streams do not end by themselves
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
