// Package consumers reads Kafka topics as a member of a consumer group with
// explicit, per-generation commits, and reads partitions without a group
// (ReadPartitionRange, EndOffsets) to reload state from changelog topics.
//
// Guarantees of Group.Run:
//   - Delivery is at-least-once. Nothing is committed automatically: a
//     partition's offset moves only when the handler calls its CommitFunc
//     with the next offset to read. After a restart or a rebalance the
//     partition's new owner starts exactly at the last committed offset
//     (or at StartAt when the group never committed that partition).
//   - Records of a partition arrive on Claim.Records in offset order, with
//     no gaps other than those in the log itself (compaction, transaction
//     markers).
//   - A CommitFunc is bound to its claim's generation. While the handler
//     runs, also after its ctx ended, commits go to the coordinator, which
//     accepts them only while the generation is still the group's current
//     one: during a rebalance the group cannot form its next generation
//     before this member rejoins, and this member rejoins only after every
//     handler returned, so a handler's flush-and-commit on ctx end lands
//     before the partition moves. A handler that overruns the rebalance
//     timeout is dropped from the group and its commits are rejected
//     (ErrGenerationEnded). Once the handler returned, its CommitFunc
//     returns ErrGenerationEnded without contacting the broker. So a stale
//     member can never move a partition's offset after the partition moved
//     to another member.
//   - Run waits for every handler of a generation to return before this
//     member rejoins the group, so a handler can flush and commit when its
//     ctx ends; the partitions are handed to other members only after
//     that (bounded by the rebalance timeout).
//   - Fetching is bounded: each partition holds at most Config.Buffer
//     records in its Claim.Records channel plus Config.Buffer records in
//     the fetcher's queue and one fetch response (MaxBytes); when the
//     handler is slow, fetching pauses.
//   - On shutdown (ctx end or Close) the member leaves the group from its
//     running generation, after every handler returned, without rejoining
//     first: the leave does not wait for the other members to rebalance.
//   - Broker failures are retried with backoff and logged; Run returns only
//     when its ctx ends (nil) or on a configuration error.
package consumers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/internal/kafkasec"
)

// Header is one record header (the type both Kafka sides share).
type Header = chunk.Header

// Record is one consumed record.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Time      time.Time
}

// Config configures a Group.
type Config struct {
	// Brokers is the bootstrap list, host:port each.
	Brokers []string
	// GroupID names the consumer group.
	GroupID string
	// Topics are the subscribed topics.
	Topics []string
	// Security holds TLS and SASL settings.
	Security kafkasec.Config
	// StartAt is where a partition without a committed offset starts:
	// "earliest" (default) or "latest".
	StartAt string
	// Buffer is the number of records buffered per partition before
	// fetching pauses (default 256).
	Buffer int
	// SessionTimeout is the group session timeout (default 10s): a member
	// that stops heartbeating for this long is removed from the group.
	SessionTimeout time.Duration
	// HeartbeatInterval (default 1s; at most SessionTimeout/3) also bounds
	// how fast this member notices a rebalance.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance, i.e. how long handlers have to flush when
	// their ctx ends (default 30s).
	RebalanceTimeout time.Duration
	// MaxWait is the longest a fetch waits for new data (default 250ms).
	MaxWait time.Duration
	// MaxBytes caps one fetch response per partition (default 1 MiB).
	MaxBytes int
	// Reassembly, when set, puts records written as chunks
	// (chunk.Split) back together before the handler sees them and
	// holds commits before the first chunk of any unfinished record; see
	// Reassemble.
	Reassembly *ReassemblyConfig
}

// Claim is one partition assigned to this member for one generation.
type Claim struct {
	Topic      string
	Partition  int
	Generation int32
	// StartOffset is the committed offset (or the resolved earliest/latest
	// offset): the offset of the first record delivered.
	StartOffset int64
	// Records delivers the partition's records in offset order; it is
	// closed when the generation ends or Run's ctx ends.
	Records <-chan Record
}

// CommitFunc commits next-offset-to-read for the claim's partition within
// the claim's generation. It returns an error wrapping ErrGenerationEnded
// (and commits nothing) once that generation is over: after the handler
// returned, or when the coordinator has moved on to a newer generation.
// Calling it after the handler's ctx ended but before the handler returns
// is the way to flush on a rebalance or shutdown.
type CommitFunc func(ctx context.Context, nextOffset int64) error

// ClaimFunc handles one claim. Its ctx ends when the generation ends or
// Run's ctx ends. Returning a non-nil error (other than the ctx's) ends the
// generation for this member, which then rejoins and gets its partitions
// again from the last commit; returning nil before ctx ends stops this
// partition until the next generation.
type ClaimFunc func(ctx context.Context, claim Claim, commit CommitFunc) error

// ErrGenerationEnded is returned by a CommitFunc called after its
// generation ended.
var ErrGenerationEnded = errors.New("consumers: the generation of this claim has ended (rebalance or shutdown); the commit was not made, the partition's next owner restarts from the last successful commit")

// Option configures NewGroup.
type Option func(*options)

type options struct {
	reg    prometheus.Registerer
	logger zerolog.Logger
}

// WithRegisterer registers the group's metrics with r (shared between
// groups on the same registerer).
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithLogger sets the logger (default: none).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.logger = l } }

// Group is one member of a consumer group.
type Group struct {
	cfg    Config
	dialer *kafka.Dialer
	log    zerolog.Logger
	m      *metrics

	mu      sync.Mutex
	running bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}

	health healthState
}

// NewGroup validates cfg. It does not connect; Run does.
func NewGroup(cfg Config, opts ...Option) (*Group, error) {
	o := options{logger: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("consumers: no brokers configured: set Config.Brokers (host:port list)")
	}
	if cfg.GroupID == "" {
		return nil, errors.New("consumers: no GroupID configured")
	}
	if len(cfg.Topics) == 0 {
		return nil, errors.New("consumers: no topics configured")
	}
	switch cfg.StartAt {
	case "", "earliest", "latest":
	default:
		return nil, fmt.Errorf("consumers: StartAt %q: use \"earliest\" or \"latest\"", cfg.StartAt)
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 256
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	cfg.HeartbeatInterval = min(cfg.HeartbeatInterval, cfg.SessionTimeout/3)
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = 30 * time.Second
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 250 * time.Millisecond
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	d, err := cfg.Security.Dialer()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	m.assigned.WithLabelValues(cfg.GroupID).Set(0) // exported from the start
	m.rebalances.WithLabelValues(cfg.GroupID)
	if cfg.Reassembly != nil {
		rc := *cfg.Reassembly
		if rc.metrics, err = newChunkMetrics(o.reg); err != nil {
			return nil, err
		}
		cfg.Reassembly = &rc
	}
	return &Group{cfg: cfg, dialer: d, log: o.logger.With().Str("group", cfg.GroupID).Logger(), m: m}, nil
}

// Run joins the group and, for every generation, calls fn once per
// assigned partition, each in its own goroutine; see the package
// documentation for the guarantees. Run returns nil when ctx ends or Close
// is called, or an error on a configuration error, including credentials
// the brokers refuse (wrapping kafkasec.ErrAuthentication).
func (g *Group) Run(ctx context.Context, fn ClaimFunc) error {
	g.mu.Lock()
	if g.running || g.closed {
		g.mu.Unlock()
		return errors.New("consumers: Run called twice or after Close: create a new Group")
	}
	g.running = true
	ctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	g.done = make(chan struct{})
	g.mu.Unlock()
	defer close(g.done)
	defer cancel()

	start := kafka.FirstOffset
	if g.cfg.StartAt == "latest" {
		start = kafka.LastOffset
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                g.cfg.GroupID,
		Brokers:           g.cfg.Brokers,
		Dialer:            g.dialer,
		Topics:            g.cfg.Topics,
		HeartbeatInterval: g.cfg.HeartbeatInterval,
		SessionTimeout:    g.cfg.SessionTimeout,
		RebalanceTimeout:  g.cfg.RebalanceTimeout,
		JoinGroupBackoff:  500 * time.Millisecond,
		StartOffset:       start,
		Timeout:           10 * time.Second,
		// The partition watcher ends a generation when a topic gains
		// partitions, so new partitions get assigned.
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 5 * time.Second,
		ErrorLogger:            kafka.LoggerFunc(func(f string, a ...any) { g.log.Debug().Msgf(f, a...) }),
	})
	if err != nil {
		return fmt.Errorf("consumers: group configuration: %w", err)
	}
	defer func() {
		// Leaving the group is best effort: every handler has flushed and
		// committed by now, and a coordinator that does not answer (a broker
		// in trouble) expires the member after the session timeout anyway.
		// Bound it so a shutdown keeps its deadline. Close is called while
		// the last generation is still running (see runGeneration), so
		// kafka-go leaves the group directly instead of first rejoining it.
		left := make(chan struct{})
		go func() { _ = cg.Close(); close(left) }()
		select {
		case <-left:
		case <-time.After(5 * time.Second):
			g.log.Warn().Msg("leaving the consumer group did not finish within 5s; the coordinator will expire this member")
		}
	}()

	backoff := 100 * time.Millisecond
	var refusedSince time.Time // first refusal of the credentials in a row
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return nil
			}
			if g.cfg.Security.SASLMechanism != "" || g.cfg.Security.TLS != nil {
				if cerr := g.cfg.Security.Check(ctx, g.cfg.Brokers); errors.Is(cerr, kafkasec.ErrAuthentication) {
					if refusedSince.IsZero() {
						refusedSince = time.Now()
					}
					if !g.cfg.Security.Reloads() || time.Since(refusedSince) > kafkasec.RotationGrace {
						return fmt.Errorf("consumers: %w", cerr)
					}
					g.log.Warn().Err(cerr).Dur("retrying_for", kafkasec.RotationGrace).
						Msg("the brokers refuse the credentials; they are read from files that may be mid-rotation: retrying")
				} else {
					refusedSince = time.Time{}
				}
			}
			g.log.Warn().Err(err).Msg("joining the consumer group failed; retrying")
			g.m.rejoins.Inc()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff, refusedSince = 100*time.Millisecond, time.Time{}
		g.runGeneration(ctx, gen, fn)
	}
}

// runGeneration runs fn for each assignment of gen and returns when all
// of them returned and the generation is over.
func (g *Group) runGeneration(runCtx context.Context, gen *kafka.Generation, fn ClaimFunc) {
	n := 0
	var parts []string
	for topic, as := range gen.Assignments {
		n += len(as)
		for _, a := range as {
			parts = append(parts, topic+"/"+itoa(a.ID))
		}
	}
	g.health.startGeneration(gen.ID, parts)
	g.m.rebalances.WithLabelValues(g.cfg.GroupID).Inc()
	g.m.assigned.WithLabelValues(g.cfg.GroupID).Set(float64(n))
	defer func() {
		// The partitions may move to other members: their committed
		// offsets are reported by their new owners (and, from the
		// brokers' data, by the lag exporter).
		g.health.endGeneration()
		g.m.assigned.WithLabelValues(g.cfg.GroupID).Set(0)
		for topic, as := range gen.Assignments {
			for _, a := range as {
				g.m.committed.DeleteLabelValues(topic, itoa(a.ID))
			}
		}
	}()
	g.log.Info().Int32("generation", gen.ID).Str("member", gen.MemberID).Int("partitions", n).Msg("generation started")
	finished := make(chan struct{})
	// drained is closed on shutdown once every handler has flushed and
	// returned. The supervisor then stays in the generation until Run's
	// deferred ConsumerGroup.Close ends it: kafka-go ends a generation as
	// soon as a function started with Generation.Start returns, and then
	// immediately joins the next one; a JoinGroup of the group's leader
	// starts a rebalance that the coordinator holds until every other
	// member has rejoined or timed out (a member that died without leaving:
	// up to the session timeout). Only after that would Close get to send
	// LeaveGroup, so a SIGTERM took seconds. Closing while the generation
	// is still running makes kafka-go send LeaveGroup right away.
	drained := make(chan struct{})
	// One supervisor per generation: kafka-go ends the generation as soon as
	// any function started with Generation.Start returns, so per-partition
	// goroutines are our own and the supervisor returns only after all of
	// them did. Generation.close (before the next JoinGroup) waits for it.
	gen.Start(func(genCtx context.Context) {
		defer close(finished)
		ctx, cancel := context.WithCancel(runCtx)
		defer cancel()
		stop := context.AfterFunc(genCtx, cancel)
		defer stop()
		var (
			wg      sync.WaitGroup
			failMu  sync.Mutex
			failed  error
			endOnce sync.Once
		)
		var commitMu sync.Mutex // serialise commits on the coordinator connection
		for topic, as := range gen.Assignments {
			for _, a := range as {
				wg.Add(1)
				go func(topic string, a kafka.PartitionAssignment) {
					defer wg.Done()
					var over atomic.Bool // set once fn returned
					commit := func(cctx context.Context, next int64) error {
						if over.Load() {
							return ErrGenerationEnded
						}
						if err := cctx.Err(); err != nil {
							return err
						}
						commitMu.Lock()
						defer commitMu.Unlock()
						if over.Load() {
							return ErrGenerationEnded
						}
						if err := gen.CommitOffsets(map[string]map[int]int64{topic: {a.ID: next}}); err != nil {
							if errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.RebalanceInProgress) ||
								errors.Is(err, kafka.UnknownMemberId) {
								return fmt.Errorf("%w (coordinator: %v)", ErrGenerationEnded, err)
							}
							return fmt.Errorf("consumers: commit %s/%d@%d: %w", topic, a.ID, next, err)
						}
						g.m.committed.WithLabelValues(topic, itoa(a.ID)).Set(float64(next))
						g.health.committed(topic+"/"+itoa(a.ID), next)
						return nil
					}
					err := g.runClaim(ctx, gen, topic, a, fn, commit)
					over.Store(true)
					if err != nil && ctx.Err() == nil {
						g.log.Error().Err(err).Str("topic", topic).Int("partition", a.ID).Msg("claim handler failed; rejoining the group")
						failMu.Lock()
						failed = err
						failMu.Unlock()
						endOnce.Do(cancel)
					}
				}(topic, a)
			}
		}
		wg.Wait()
		if failed != nil {
			// Ending the generation makes this member rejoin; give the
			// broker a moment so a persistent failure does not spin.
			select {
			case <-runCtx.Done():
			case <-time.After(time.Second):
			}
			return
		}
		<-ctx.Done()
		if runCtx.Err() != nil && genCtx.Err() == nil {
			close(drained) // shutdown: wait for Close to end the generation
			<-genCtx.Done()
		}
	})
	select {
	case <-finished:
	case <-drained:
	}
	g.log.Info().Int32("generation", gen.ID).Msg("generation ended")
}

func (g *Group) runClaim(ctx context.Context, gen *kafka.Generation, topic string, a kafka.PartitionAssignment, fn ClaimFunc, commit CommitFunc) error {
	start, err := g.resolveStart(ctx, topic, a.ID, a.Offset)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ch := make(chan Record, g.cfg.Buffer)
	ph := g.health.started(topic+"/"+itoa(a.ID), start, ch)
	claim := Claim{Topic: topic, Partition: a.ID, Generation: gen.ID, StartOffset: start, Records: ch}
	if g.cfg.Reassembly != nil {
		claim, commit, _ = Reassemble(ctx, claim, commit, *g.cfg.Reassembly)
	}
	fetchCtx, stopFetch := context.WithCancel(ctx)
	fetchDone := make(chan struct{})
	go func() {
		defer close(fetchDone)
		defer close(ch)
		g.fetch(fetchCtx, topic, a.ID, start, ch, ph)
	}()
	err = fn(ctx, claim, commit)
	// The handler is done with this claim: stop fetching. Draining keeps
	// the fetcher from blocking on a full channel.
	stopFetch()
	go func() {
		for range ch {
		}
	}()
	<-fetchDone
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// resolveStart turns FirstOffset/LastOffset into a concrete offset.
func (g *Group) resolveStart(ctx context.Context, topic string, partition int, offset int64) (int64, error) {
	if offset >= 0 {
		return offset, nil
	}
	backoff := 100 * time.Millisecond
	for {
		first, last, err := partitionBounds(ctx, g.dialer, g.cfg.Brokers, topic, partition)
		if err == nil {
			if offset == kafka.LastOffset {
				return last, nil
			}
			return first, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		g.log.Warn().Err(err).Str("topic", topic).Int("partition", partition).Msg("reading partition offsets failed; retrying")
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// fetch reads the partition from start and sends records to ch until ctx
// ends. kafka-go's Reader retries broker failures internally.
func (g *Group) fetch(ctx context.Context, topic string, partition int, start int64, ch chan<- Record, ph *partHealth) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        g.cfg.Brokers,
		Topic:          topic,
		Partition:      partition,
		Dialer:         g.dialer,
		QueueCapacity:  g.cfg.Buffer,
		MinBytes:       1,
		MaxBytes:       g.cfg.MaxBytes,
		MaxWait:        g.cfg.MaxWait,
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		MaxAttempts:    1 << 30,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) {
			g.log.Info().Str("topic", topic).Int("partition", partition).Bool("retried", true).Msgf(f, a...)
		}),
	})
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		g.log.Error().Err(err).Msg("setting the fetch offset failed")
		return
	}
	part := itoa(partition)
	recs := g.m.records.WithLabelValues(topic)
	lag := g.m.lag.WithLabelValues(topic, part)
	// The partition may move to another member: drop its lag series then.
	defer g.m.lag.DeleteLabelValues(topic, part)
	expect := start
	backoff := 50 * time.Millisecond
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			g.log.Warn().Err(err).Str("topic", topic).Int("partition", partition).Msg("fetch failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if m.Offset < expect {
			continue // re-delivered after a retry: keep offsets strictly increasing
		}
		expect = m.Offset + 1
		rec := Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}
		if len(m.Headers) > 0 {
			rec.Headers = make([]Header, len(m.Headers))
			for i, h := range m.Headers {
				rec.Headers[i] = Header{Key: h.Key, Value: h.Value}
			}
		}
		select {
		case ch <- rec:
		case <-ctx.Done():
			return
		}
		recs.Inc()
		ph.deliver(rec.Offset + 1)
		if l := r.Lag(); l >= 0 {
			lag.Set(float64(l + int64(len(ch))))
		}
	}
}

// Close stops Run (as if its ctx ended), leaves the group and waits for Run
// to return.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closed = true
	cancel, done := g.cancel, g.done
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
