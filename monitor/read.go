package monitor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/schemas"
)

// Source says what the monitor reads. It reads every partition with its own
// reader and no consumer group: nothing is ever committed, so no processing
// group's offsets move.
type Source struct {
	Brokers  []string
	Security kafkasec.Config
	// Topics are the samples topics (the live one, replays ...).
	Topics []string
	// DeadLetters is the dead-letter topic; empty to leave it out.
	DeadLetters string
	// Policy is the policy topic, followed (from its beginning, without a
	// group) for the newest announced version; empty to leave it out.
	Policy string
	// From is where each partition starts: "earliest", "latest" or an
	// RFC 3339 time (the first record written at or after it).
	From string
	// Scored is the scored topic, read only for the sample view (each
	// turn's S with and without it); empty to leave it out.
	Scored string
}

// start is a resolved From.
type start struct {
	offset int64     // kafka.FirstOffset or kafka.LastOffset when at is zero
	at     time.Time // non-zero: the first offset at or after this time
}

func parseFrom(s string) (start, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "earliest":
		return start{offset: kafka.FirstOffset}, nil
	case "latest":
		return start{offset: kafka.LastOffset}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return start{}, fmt.Errorf("monitor: --from %q: use earliest, latest or an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return start{at: t}, nil
}

// Check reports a source that cannot work, saying what to change.
func (s *Source) Check() error {
	if len(s.Brokers) == 0 {
		return errors.New("monitor: no brokers: set --brokers host:port,...")
	}
	if len(s.Topics) == 0 {
		return errors.New("monitor: no samples topic: set --topics")
	}
	_, err := parseFrom(s.From)
	return err
}

// offsetAt returns the first offset of topic/partition written at or after
// t, or -1 when no record is.
func offsetAt(ctx context.Context, d *kafka.Dialer, brokers []string, topic string, partition int, t time.Time) (int64, error) {
	var errs []error
	for _, b := range brokers {
		conn, err := d.DialLeader(ctx, "tcp", b, topic, partition)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		off, err := conn.ReadOffset(t)
		_ = conn.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return off, nil
	}
	return 0, fmt.Errorf("monitor: offset of %s/%d at %s: %w", topic, partition, t.Format(time.RFC3339), errors.Join(errs...))
}

// reader reads the source into an aggregator.
type reader struct {
	src   Source
	agg   *Aggregator
	log   zerolog.Logger
	from  start
	d     *kafka.Dialer
	onRec func() // after each record (metrics); may be nil
}

// handle takes one record (whole: chunked records are put back together
// before) that starts at offset first.
func (r *reader) handle(rec consumers.Record, first int64) {
	if rec.Topic == r.src.DeadLetters {
		reason := ""
		for _, h := range rec.Headers {
			if h.Key == schemas.HeaderReason {
				reason = string(h.Value)
			}
		}
		r.agg.AddDeadLetter(rec.Value, reason)
		return
	}
	if err := r.agg.AddRecordAt(rec.Topic, rec.Partition, first, rec.Value, rec.Time); err != nil {
		r.log.Debug().Err(err).Str("topic", rec.Topic).Int("partition", rec.Partition).Int64("offset", rec.Offset).
			Msg("monitor: undecodable sample counted and skipped")
	}
}

func (r *reader) topics() []string {
	ts := append([]string(nil), r.src.Topics...)
	if r.src.DeadLetters != "" {
		ts = append(ts, r.src.DeadLetters)
	}
	return ts
}

// once reads every partition of every topic up to its end offset as it is
// when the partition's read starts (at start-up), then closes the open
// groups.
func (r *reader) once(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	for _, topic := range r.topics() {
		parts, err := consumers.Partitions(ctx, r.src.Brokers, r.src.Security, topic)
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			return fmt.Errorf("monitor: topic %s has no partitions: check the name (--topics, --topic-dead-letters) and the brokers", topic)
		}
		for _, p := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				from := r.from.offset
				if !r.from.at.IsZero() {
					off, err := offsetAt(ctx, r.d, r.src.Brokers, topic, p, r.from.at)
					if err != nil {
						fail(err)
						return
					}
					if off < 0 { // no record written at or after the time
						return
					}
					from = off
				} else if from == kafka.LastOffset {
					return // nothing written before start-up is read
				}
				ch := newChunks()
				_, err := consumers.ReadPartitionRange(ctx, r.src.Brokers, r.src.Security, topic, p, from, func(raw consumers.Record) error {
					if rec, first := ch.add(raw); rec != nil {
						r.handle(*rec, first)
					}
					if r.onRec != nil {
						r.onRec()
					}
					return nil
				})
				if err != nil {
					fail(err)
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	r.agg.Finish()
	return nil
}

// follow reads every partition from the start position until ctx ends. A
// topic that does not exist yet is looked for again every two seconds.
// Partitions added to a topic later are not picked up.
func (r *reader) follow(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, topic := range r.topics() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var parts []int
			for {
				var err error
				parts, err = consumers.Partitions(ctx, r.src.Brokers, r.src.Security, topic)
				if err == nil && len(parts) > 0 {
					break
				}
				r.log.Info().Err(err).Str("topic", topic).Msg("monitor: waiting for the topic")
				select {
				case <-ctx.Done():
					return
				case <-time.After(2 * time.Second):
				}
			}
			for _, p := range parts {
				wg.Add(1)
				go func() { defer wg.Done(); r.followPartition(ctx, topic, p) }()
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (r *reader) followPartition(ctx context.Context, topic string, p int) {
	kr := kafka.NewReader(kafka.ReaderConfig{
		Brokers: r.src.Brokers, Topic: topic, Partition: p, Dialer: r.d,
		MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 200 * time.Millisecond,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second,
	})
	defer kr.Close()
	var err error
	if !r.from.at.IsZero() {
		err = kr.SetOffsetAt(ctx, r.from.at)
	} else {
		err = kr.SetOffset(r.from.offset)
	}
	if err != nil {
		r.log.Error().Err(err).Str("topic", topic).Int("partition", p).Msg("monitor: cannot seek; partition not read")
		return
	}
	ch := newChunks()
	for {
		m, err := kr.FetchMessage(ctx) // no group: nothing to commit
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn().Err(err).Str("topic", topic).Int("partition", p).Msg("monitor: read failed; retrying")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		rec := consumers.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Time: m.Time}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, consumers.Header{Key: h.Key, Value: h.Value})
		}
		if rec, first := ch.add(rec); rec != nil {
			r.handle(*rec, first)
		}
		if r.onRec != nil {
			r.onRec()
		}
	}
}
