// Package producers writes keyed records to Kafka with acknowledgement from
// every in-sync replica (acks=all).
//
// Guarantees:
//   - Produce returns nil only after the broker acknowledged every message of
//     the call (acks=all). On error, some messages of the call may have been
//     written (at-least-once: callers retry the whole call and consumers
//     tolerate duplicates).
//   - Messages of one call that go to the same partition are written in the
//     order given. Ordering can break only if a partition's batch exhausts
//     its retries while a later batch of the same call succeeds; the call then
//     returns an error and the retry rewrites the failed messages after the
//     successful ones.
//   - The partition of a keyed message is murmur2(key) mod partitions, the
//     algorithm of the Java client's default partitioner, so records keyed by
//     prompt_id land where a Java or librdkafka (murmur2_random) producer
//     puts them. Messages with a nil key are spread randomly.
//   - Transient failures (broker unreachable, leader changes, timeouts) are
//     retried with backoff for up to Config.RetryFor; permanent ones (record
//     too large, authentication or authorisation failure) fail at once.
//   - Many goroutines may call Produce at once; their messages are batched
//     together (BatchTimeout, BatchBytes) per partition.
//   - A record larger than BatchBytes is written as chunk messages (Split):
//     same key, same partition, in order within the call. When any chunk of
//     a record fails, the retry writes all of that record's chunks again, so
//     a reader always finds a complete in-order run of chunks after any
//     partial one. Records that fit are written unchanged, as one message.
package producers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/internal/kafkasec"
)

// Header is one record header (the type both Kafka sides share).
type Header = chunk.Header

// Message is one record to write.
type Message struct {
	Topic      string
	Key, Value []byte
	Headers    []Header
}

// Config configures a Producer.
type Config struct {
	// Brokers is the bootstrap list, host:port each.
	Brokers []string
	// Security holds TLS and SASL settings.
	Security kafkasec.Config
	// BatchTimeout is how long a partition's batch waits for more messages
	// before it is sent (default 2ms).
	BatchTimeout time.Duration
	// BatchBytes caps one produce batch (default 900_000, under the
	// broker's default 1 MiB message.max.bytes). A single record larger
	// than this is rejected by Produce.
	BatchBytes int64
	// BatchSize caps the records in one batch (default 256). kafka-go
	// allocates room for BatchSize records with every batch it starts, so a
	// large value costs an allocation of ~150 bytes x BatchSize (and its
	// zeroing) per batch, however few records the batch gets, and the
	// advantage stage writes one small batch per group (the cost of a large
	// value is measured in docs/performance-passes.md). BatchBytes bounds a
	// batch long before 256 records of the pipeline's sizes.
	BatchSize int
	// RetryFor bounds how long transient failures are retried within one
	// Produce call (default 60s).
	RetryFor time.Duration
	// WriteTimeout bounds one produce request (default 10s).
	WriteTimeout time.Duration
	// Compression is "", "none", "gzip", "snappy", "lz4" or "zstd" (see
	// docs/kafka.md for measured ratios and costs on creditflow's records).
	Compression string
	// ChunkBytes is the value bytes per chunk when a record is too large for
	// one message (over BatchBytes): such a record is written as chunks with
	// the same key (see Split and docs/wire-format.md). Default
	// chunk.DefaultBytes, cut to fit BatchBytes; negative turns chunking off,
	// and Produce then rejects such a record.
	ChunkBytes int
	// AutoCreateTopics lets a produce to a missing topic create it with
	// the broker's defaults (when the broker allows it). Off by default:
	// create topics with EnsureTopics.
	AutoCreateTopics bool
}

// Option configures New.
type Option func(*options)

type options struct {
	reg    prometheus.Registerer
	logger zerolog.Logger
}

// WithRegisterer registers the producer's metrics with r. Several producers
// may share one registerer; they then share the metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithLogger sets the logger for retries and failures (default: none).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.logger = l } }

// Producer writes messages; see the package documentation.
type Producer struct {
	w   *kafka.Writer
	cfg Config
	m   *metrics
	log zerolog.Logger
}

// New validates cfg and returns a Producer. It does not connect; the first
// Produce does.
func New(cfg Config, opts ...Option) (*Producer, error) {
	o := options{logger: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("producers: no brokers configured: set Config.Brokers (host:port list)")
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 2 * time.Millisecond
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = 900_000
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = 60 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	tr, err := cfg.Security.Transport()
	if err != nil {
		return nil, fmt.Errorf("producers: %w", err)
	}
	comp, err := compression(cfg.Compression)
	if err != nil {
		return nil, fmt.Errorf("producers: %w", err)
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	w := &kafka.Writer{
		Addr:            kafka.TCP(cfg.Brokers...),
		Balancer:        &kafka.Murmur2Balancer{},
		MaxAttempts:     8,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: time.Second,
		BatchSize:       cfg.BatchSize,
		BatchBytes:      cfg.BatchBytes,
		BatchTimeout:    cfg.BatchTimeout,
		ReadTimeout:     cfg.WriteTimeout,
		WriteTimeout:    cfg.WriteTimeout,
		RequiredAcks:    kafka.RequireAll,
		Compression:     comp,
		Transport:       tr,

		AllowAutoTopicCreation: cfg.AutoCreateTopics,
	}
	return &Producer{w: w, cfg: cfg, m: m, log: o.logger}, nil
}

// Produce writes msgs and blocks until all are acknowledged or it fails; see
// the package documentation for the guarantees.
func (p *Producer) Produce(ctx context.Context, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	km := make([]kafka.Message, 0, len(msgs))
	var owner []int // owner[j]: the index in msgs of km[j]; set once a record is chunked
	for i, m := range msgs {
		if m.Topic == "" {
			return fmt.Errorf("producers: message %d has no topic", i)
		}
		parts := []Message{m}
		if size := messageSize(m); size > p.cfg.BatchBytes {
			c := p.chunkBytes(m)
			if c == 0 {
				return fmt.Errorf("producers: message %d to %s is %d bytes, over the batch limit of %d bytes: turn chunking on (ChunkBytes >= 0) or raise BatchBytes (and the topic's max.message.bytes)", i, m.Topic, size, p.cfg.BatchBytes)
			}
			parts = Split(m, c)
			p.m.chunked.WithLabelValues(m.Topic).Inc()
			if owner == nil {
				owner = make([]int, len(km), len(msgs)+len(parts))
				for j := range owner {
					owner[j] = j
				}
			}
		}
		for _, part := range parts {
			if owner != nil {
				owner = append(owner, i)
			}
			km = append(km, toKafka(part))
		}
	}
	start := time.Now()
	deadline := start.Add(p.cfg.RetryFor)
	pending := km
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := p.w.WriteMessages(ctx, pending...)
		if err == nil {
			p.m.duration.Observe(time.Since(start).Seconds())
			p.count(pending, nil)
			return nil
		}
		failed := pending[:0:0]
		var werrs kafka.WriteErrors
		perMessage := errors.As(err, &werrs) && len(werrs) == len(pending)
		if perMessage && owner != nil {
			// A chunked record is retried whole: every chunk again, in order.
			werrs = kafka.WriteErrors(wholeRecords(werrs, owner))
		}
		if perMessage {
			var ok []kafka.Message
			var first error
			for i, e := range werrs {
				if e != nil {
					failed = append(failed, pending[i])
					if first == nil {
						first = e
					}
				} else {
					ok = append(ok, pending[i])
				}
			}
			p.count(ok, nil)
			err = first
		} else {
			failed = pending
		}
		var failedOwner []int // the caller's message of each failed kafka message (chunks)
		if owner != nil {
			failedOwner = failedOwners(werrs, owner, len(failed), perMessage)
		}
		nfailed := countRecords(failed, failedOwner)
		if err == nil { // all succeeded after all
			p.m.duration.Observe(time.Since(start).Seconds())
			return nil
		}
		if ctx.Err() != nil {
			p.count(failed, err)
			return fmt.Errorf("producers: %d of %d messages not acknowledged: %w", nfailed, len(msgs), ctx.Err())
		}
		// Credentials read from files may be mid-rotation: those are
		// retried as any failure (the consumer group gives up after
		// kafkasec.RotationGrace).
		if attempt == 1 && (p.cfg.Security.SASLMechanism != "" || p.cfg.Security.TLS != nil) && !p.cfg.Security.Reloads() && Retriable(err) {
			// A refused login looks like a dropped connection to the
			// writer; ask once so that bad credentials fail fast and clearly.
			if cerr := p.cfg.Security.Check(ctx, p.cfg.Brokers); errors.Is(cerr, kafkasec.ErrAuthentication) {
				p.count(failed, cerr)
				return fmt.Errorf("producers: %w", cerr)
			}
		}
		if !Retriable(err) || time.Now().Add(backoff).After(deadline) {
			p.count(failed, err)
			if errors.Is(err, kafka.UnknownTopicOrPartition) {
				err = fmt.Errorf("%w: topic %s (create the topic with EnsureTopics, or set AutoCreateTopics)", err, strings.Join(topicsOf(failed), ", "))
			}
			return fmt.Errorf("producers: %d of %d messages failed after %d attempts over %s: %w", nfailed, len(msgs), attempt, time.Since(start).Round(time.Millisecond), err)
		}
		p.log.Warn().Err(err).Int("failed", nfailed).Strs("topics", topicsOf(failed)).Int("attempt", attempt).Msg("produce failed, retrying")
		select {
		case <-ctx.Done():
			p.count(failed, ctx.Err())
			return fmt.Errorf("producers: %d of %d messages not acknowledged: %w", nfailed, len(msgs), ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
		owner = failedOwner
		pending = failed
	}
}

func toKafka(m Message) kafka.Message {
	km := kafka.Message{Topic: m.Topic, Key: m.Key, Value: m.Value}
	if len(m.Headers) > 0 {
		km.Headers = make([]kafka.Header, len(m.Headers))
		for j, h := range m.Headers {
			km.Headers[j] = kafka.Header{Key: h.Key, Value: h.Value}
		}
	}
	return km
}

func (p *Producer) count(msgs []kafka.Message, err error) {
	if len(msgs) == 0 {
		return
	}
	byTopic := map[string]int{}
	for _, m := range msgs {
		byTopic[m.Topic]++
	}
	for t, n := range byTopic {
		// Both series of a topic exist once it was written to, so an
		// error rate is 0 rather than absent while all is well.
		recs, errs := p.m.records.WithLabelValues(t), p.m.errors.WithLabelValues(t)
		if err != nil {
			errs.Add(float64(n))
		} else {
			recs.Add(float64(n))
		}
	}
}

// Retriable reports whether a produce or fetch error is transient (worth
// retrying): network failures, timeouts and Kafka errors marked temporary.
func Retriable(err error) bool {
	if err == nil {
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke.Temporary()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, kafka.ErrGenerationEnded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// Close flushes pending batches and releases connections.
func (p *Producer) Close() error {
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("producers: close: %w", err)
	}
	return nil
}

// CheckCompression returns an error unless name is a codec Config.Compression
// takes: "none", "gzip", "snappy", "lz4" or "zstd" ("" is none).
func CheckCompression(name string) error {
	_, err := compression(name)
	return err
}

func compression(name string) (kafka.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("unknown compression %q: use none, gzip, snappy, lz4 or zstd", name)
}

// countRecords is how many of the caller's messages the failed kafka
// messages belong to: a record written as chunks counts once.
func countRecords(failed []kafka.Message, owner []int) int {
	if owner == nil {
		return len(failed)
	}
	seen := map[int]bool{}
	for _, o := range owner {
		seen[o] = true
	}
	return len(seen)
}

// topicsOf returns the distinct topics of msgs, sorted.
func topicsOf(msgs []kafka.Message) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if !seen[m.Topic] {
			seen[m.Topic] = true
			out = append(out, m.Topic)
		}
	}
	sort.Strings(out)
	return out
}
