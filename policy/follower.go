// Package policy carries policy versions through Kafka: trainers announce
// each new version on a compacted control topic (Announce), and the stages
// and scorer servers follow it (Follower).
//
// # Guarantees
//
//   - The newest announced version is the maximum version of every
//     announcement read: an older or repeated announcement never moves it
//     back, so the order announcements arrive in does not matter.
//   - A Follower never joins a consumer group and never commits offsets: any
//     number of processes can follow the same topic without affecting each
//     other or any processing group. It reads every partition of the topic
//     from the earliest offset.
//   - Ready is closed once the follower has read the topic up to its end
//     offsets as of its first successful poll (or found that the topic does
//     not exist yet: nothing is announced). Waiting for it before emitting
//     makes a restarted or replaying stage start from every announcement
//     already on the topic.
//   - An announcement that does not decode is skipped, logged with its
//     reason and counted in creditflow_policy_announcements_invalid_total;
//     it never stops the follower. Tombstones (empty values) announce nothing.
//
// The wire format (topic, key, schema) is in docs/wire-format.md; how the
// stages use versions is in docs/stream.md ("Policy versions").
package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/schemas"
)

// DefaultTopic is the control topic's name when none is configured.
const DefaultTopic = "creditflow.policy"

// Follower follows a policy topic. Create it with NewFollower and call Run
// in a goroutine; the other methods are safe for concurrent use.
type Follower struct {
	brokers []string
	sec     kafkasec.Config
	topic   string
	cfg     followerConfig

	newest atomic.Pointer[schemas.PolicyAnnouncement] // the announcement with the maximum version
	ready  chan struct{}
	once   sync.Once
	next   map[int]int64 // per partition: next offset to read
}

// Option configures a Follower.
type Option func(*followerConfig)

type followerConfig struct {
	poll     time.Duration
	log      zerolog.Logger
	onNewest func(schemas.PolicyAnnouncement)
	invalid  prometheus.Counter
	version  prometheus.Gauge
}

// WithPollInterval sets how often the topic is polled for new
// announcements (default 1s).
func WithPollInterval(d time.Duration) Option {
	return func(c *followerConfig) {
		if d > 0 {
			c.poll = d
		}
	}
}

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(c *followerConfig) { c.log = l } }

// WithOnNewest calls fn, from the follower's goroutine, each time the newest
// announced version increases (once per increase, in increasing order).
// fn should return quickly; a scorer loading weights does it elsewhere.
func WithOnNewest(fn func(schemas.PolicyAnnouncement)) Option {
	return func(c *followerConfig) { c.onNewest = fn }
}

// WithRegisterer registers the follower's metrics with reg:
// creditflow_policy_version_announced (gauge, -1 before any announcement)
// and creditflow_policy_announcements_invalid_total. Followers of one
// process share the series.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *followerConfig) {
		version, invalid := NewMetrics()
		version, _ = promreg.Register(reg, version)
		invalid, _ = promreg.Register(reg, invalid)
		c.version, c.invalid = version, invalid
	}
}

// WithMetrics makes the follower set version to the newest announced
// version and count undecodable announcements in invalid (collectors the
// caller registered, see NewMetrics).
func WithMetrics(version prometheus.Gauge, invalid prometheus.Counter) Option {
	return func(c *followerConfig) { c.version, c.invalid = version, invalid }
}

// NewMetrics returns, unregistered, the follower's gauge
// creditflow_policy_version_announced (set to -1) and counter
// creditflow_policy_announcements_invalid_total.
func NewMetrics() (prometheus.Gauge, prometheus.Counter) {
	ver := prometheus.NewGauge(prometheus.GaugeOpts{Name: "creditflow_policy_version_announced",
		Help: "Newest policy version announced on the policy topic (the maximum read); -1 before any."})
	ver.Set(-1)
	inv := prometheus.NewCounter(prometheus.CounterOpts{Name: "creditflow_policy_announcements_invalid_total",
		Help: "Records on the policy topic that did not decode as announcements (skipped and logged)."})
	return ver, inv
}

// NewFollower follows topic (DefaultTopic when empty) on brokers.
func NewFollower(brokers []string, sec kafkasec.Config, topic string, opts ...Option) *Follower {
	if topic == "" {
		topic = DefaultTopic
	}
	cfg := followerConfig{poll: time.Second, log: zerolog.Nop()}
	for _, o := range opts {
		o(&cfg)
	}
	return &Follower{brokers: brokers, sec: sec, topic: topic, cfg: cfg, ready: make(chan struct{}), next: map[int]int64{}}
}

// Topic is the followed topic's name.
func (f *Follower) Topic() string { return f.topic }

// Newest returns the newest announced version; ok is false before any
// announcement was read.
func (f *Follower) Newest() (version int64, ok bool) {
	if a := f.newest.Load(); a != nil {
		return a.Version, true
	}
	return 0, false
}

// Latest returns the announcement with the newest version.
func (f *Follower) Latest() (schemas.PolicyAnnouncement, bool) {
	if a := f.newest.Load(); a != nil {
		return *a, true
	}
	return schemas.PolicyAnnouncement{}, false
}

// Ready is closed once the topic has been read to its end offsets as of the
// first successful poll.
func (f *Follower) Ready() <-chan struct{} { return f.ready }

// WaitReady waits for Ready, at most timeout; it reports whether the
// follower is ready.
func (f *Follower) WaitReady(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.ready:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Run polls the topic until ctx ends; it returns nil then. Broker errors are
// logged and retried at the poll interval.
func (f *Follower) Run(ctx context.Context) error {
	failures := 0
	for {
		err := f.poll(ctx)
		switch {
		case err == nil:
			failures = 0
			f.once.Do(func() { close(f.ready) })
		case ctx.Err() != nil:
			return nil
		default:
			failures++
			if failures == 1 || failures%40 == 0 {
				f.cfg.log.Warn().Err(err).Str("topic", f.topic).Int("failures", failures).Msg("policy topic not readable; retrying")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.cfg.poll):
		}
	}
}

// poll reads every partition from where the last poll stopped to its end.
func (f *Follower) poll(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := consumers.EndOffsets(pctx, f.brokers, f.sec, f.topic)
	if err != nil {
		if errors.Is(err, kafka.UnknownTopicOrPartition) {
			return nil // nothing announced yet
		}
		return err
	}
	for p, end := range ends {
		from, ok := f.next[p]
		if !ok {
			from = kafka.FirstOffset
		}
		if ok && from >= end {
			continue
		}
		next, err := consumers.ReadPartitionRange(pctx, f.brokers, f.sec, f.topic, p, from, func(r consumers.Record) error {
			f.apply(r)
			return nil
		})
		if err != nil {
			return err
		}
		f.next[p] = next
	}
	return nil
}

// apply takes one record of the topic into account.
func (f *Follower) apply(r consumers.Record) {
	if len(r.Value) == 0 {
		return // a tombstone (compaction deletes the key); it announces nothing
	}
	a, err := schemas.Policies().Decode(r.Value)
	if err != nil {
		if f.cfg.invalid != nil {
			f.cfg.invalid.Inc()
		}
		f.cfg.log.Error().Err(err).Str("reason", schemas.ReasonOf(err)).Str("topic", r.Topic).Int("partition", r.Partition).
			Int64("offset", r.Offset).Msg("policy announcement skipped: not a PolicyAnnouncement record")
		return
	}
	f.Observe(*a)
}

// Observe takes an announcement into account as if read from the topic
// (the maximum version wins). It reports whether the newest version grew.
func (f *Follower) Observe(a schemas.PolicyAnnouncement) bool {
	for {
		cur := f.newest.Load()
		if cur != nil && a.Version <= cur.Version {
			return false
		}
		if f.newest.CompareAndSwap(cur, &a) {
			break
		}
	}
	if f.cfg.version != nil {
		f.cfg.version.Set(float64(a.Version))
	}
	f.cfg.log.Info().Int64("version", a.Version).Str("checkpoint", a.Checkpoint).Msg("policy version announced")
	if f.cfg.onNewest != nil {
		f.cfg.onNewest(a)
	}
	return true
}
