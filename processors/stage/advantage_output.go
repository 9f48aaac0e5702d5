package stage

// The advantage stage's output side: dead letters, samples written in the
// background under the bound of unacknowledged bytes, their
// acknowledgements, and checkpoints (the partition snapshot, then the
// commit).

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/state"
)

// output is what a partition has handed to the producer or queued for it.
type output struct {
	acks        chan ack
	sem         chan struct{}
	unacked     *window         // encoded bytes handed to the producer, not yet acknowledged
	claimCtx    context.Context // ends when the partition is released
	emitCtx     context.Context // writes in flight: outlives the claim by the drain's few seconds
	queued      []queuedSend    // sends not yet handed to the producer (send, flush)
	queuedBytes int
}

// snapshotMark is the snapshot a partition wrote last, and when.
type snapshotMark struct {
	key  string // its key on the state topic
	last []byte
	at   time.Time
}

// deadLetters writes recs to the dead-letter topic; ev (if any) is the close they belong to.
func (p *partition) deadLetters(recs []consumers.Record, reason, detail string, ev *state.CloseEvent) {
	var msgs []producers.Message
	offs := make([]int64, len(recs))
	for i, r := range recs {
		offs[i] = r.Offset
		msg, err := p.a.cfg.deadLetter("advantage", r, reason, detail)
		if err != nil {
			p.log.Error().Err(err).Int64("offset", r.Offset).Msg("encode dead letter")
			continue
		}
		msgs = append(msgs, msg)
	}
	p.log.Warn().Str("reason", reason).Str("detail", truncate(detail, 200)).Int("records", len(recs)).Msg("dead letter")
	p.send(msgs, &emission{ev: ev, offsets: offs, started: time.Now()}, false)
}

// send queues msgs to be written in the background; the partition loop
// learns of the ack. e settles once all of its sends are acknowledged: every
// send of one emission is made before the partition loop handles the acks
// again. With recycle, the messages' values are buffers of a.buffers,
// handed back once the broker acknowledged them.
//
// Sends are coalesced: the partition loop hands the queued ones to the
// producer in one call when it has no record waiting (flushIdle), and send
// does at once when they reach coalesceBytes or coalesceSends, or when one
// send is a large sample's (emitEachBytes): a producer call costs about as
// much as building a small group's samples (docs/performance-passes.md).
func (p *partition) send(msgs []producers.Message, e *emission, recycle bool) {
	size := 0
	for _, msg := range msgs {
		size += len(msg.Value)
	}
	e.writes++
	p.out.queued = append(p.out.queued, queuedSend{msgs: msgs, e: e, recycle: recycle})
	p.out.queuedBytes += size
	if size >= emitEachBytes || p.out.queuedBytes >= coalesceBytes || len(p.out.queued) >= coalesceSends {
		p.flush() // a large sample goes as it is built (finalize)
	}
}

// Bounds of the sends queued before they go to the producer together.
const (
	coalesceBytes = 1 << 20
	coalesceSends = 64
)

// queuedSend is one send waiting for the next flush.
type queuedSend struct {
	msgs    []producers.Message
	e       *emission
	recycle bool
}

// flushIdle flushes the queued sends when no record is waiting to be
// handled: what is built goes out before the partition loop waits.
func (p *partition) flushIdle(records <-chan consumers.Record) {
	if len(p.out.queued) > 0 && len(records) == 0 {
		p.flush()
	}
}

// flush writes the queued sends in one producer call in the background.
//
// It waits while the partition's unacknowledged output is at its bound
// (Config.MaxUnackedBytes), so that building samples does not run far ahead
// of writing them.
func (p *partition) flush() {
	if len(p.out.queued) == 0 {
		return
	}
	sends, size := p.out.queued, p.out.queuedBytes
	p.out.queued, p.out.queuedBytes = nil, 0
	msgs := sends[0].msgs
	if len(sends) > 1 {
		msgs = make([]producers.Message, 0, len(sends)*len(sends[0].msgs))
		for _, s := range sends {
			msgs = append(msgs, s.msgs...)
		}
	}
	p.out.sem <- struct{}{}
	// Once the partition is being released the bound no longer waits: the
	// writes in flight may be retrying against an unreachable broker, and
	// the release must not wait for them (they get the drain's few seconds).
	held := p.out.unacked.acquire(p.out.claimCtx, size)
	go func() {
		err := produceRetry(p.out.emitCtx, p.a.prod, msgs, p.log)
		if held {
			p.out.unacked.release(size)
		}
		written := err == nil
		if errors.As(err, new(*unwritableError)) {
			// Retrying cannot help (the samples' limits keep records far below the
			// broker's maximum, so this is a misconfigured topic or broker): say
			// so loudly and move on rather than stall the partition forever.
			p.a.cfg.Metrics.unwritable.WithLabelValues("advantage").Add(float64(len(msgs)))
			p.log.Error().Err(err).Int("messages", len(msgs)).Msg("the broker refused these outputs for good; they are skipped")
			err = nil
		}
		for _, s := range sends {
			if written {
				for _, msg := range s.msgs {
					p.a.cfg.Metrics.recordsOut.WithLabelValues("advantage", msg.Topic).Inc()
					if s.recycle {
						// Acknowledged: the producer holds no reference any more. (After
						// an error it may: a cancelled write can still sit in a batch.)
						p.a.buffers.put(msg.Value)
					}
				}
			}
			p.out.acks <- ack{e: s.e, err: err}
		}
		<-p.out.sem
	}()
}

func (p *partition) acked(k ack) {
	if k.err != nil {
		return // the partition is being released; the next owner replays these offsets
	}
	e := k.e
	if e.writes--; e.writes > 0 {
		return // more of the group's samples are in flight
	}
	p.core.Ack(e.ev)
	for _, o := range e.offsets {
		p.core.Done(o)
	}
	p.a.cfg.Metrics.latency.WithLabelValues("advantage").Observe(time.Since(e.started).Seconds())
}

// snapshotRefresh is how often an unchanged snapshot is written again, so
// that an idle input partition's newest snapshot stays within the last
// minute of its state partition, where loadSnapshot looks first.
const snapshotRefresh = time.Minute

// checkpoint writes the partition snapshot (when it changed, or when the
// last write is older than snapshotRefresh) and then commits.
func (p *partition) checkpoint(ctx context.Context, commit consumers.CommitFunc) {
	p.a.cfg.Metrics.inflight.WithLabelValues("advantage").Set(float64(p.core.Pending()))
	snap := p.core.Snapshot()
	p.a.mu.Lock()
	p.a.positions[p.claim.Partition] = Position{Next: p.core.Next(), Committable: snap.NextOffset, OpenGroups: p.core.Open(), InFlight: len(p.out.sem)}
	p.a.mu.Unlock()
	b, err := snap.Marshal()
	if err != nil {
		p.log.Error().Err(err).Msg("marshal snapshot")
		return
	}
	if bytes.Equal(b, p.snap.last) && time.Since(p.snap.at) < snapshotRefresh {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = p.a.prod.Produce(wctx, producers.Message{Topic: p.a.cfg.Topics.State, Key: []byte(p.snap.key), Value: b})
	if err != nil {
		p.log.Warn().Err(err).Msg("state snapshot not written; offsets not committed")
		return
	}
	p.a.cfg.Metrics.snapshots.Inc()
	p.snap.last, p.snap.at = b, time.Now()
	if err := commit(ctx, snap.NextOffset); err != nil {
		p.log.Debug().Err(err).Int64("offset", snap.NextOffset).Msg("commit not accepted (the snapshot carries the position)")
	}
}
