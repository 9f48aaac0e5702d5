package stage

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/samples"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
)

// AdvantageStage reads scored trajectories, groups them by prompt_id in
// event-time windows (docs/stream.md), computes outcome and process advantages
// (docs/method.md §1–3) and writes one training sample per trajectory.
//
// Guarantees: an input offset is committed only after every sample or dead
// letter it caused is acknowledged; before each commit the partition's
// snapshot (EMA baseline, event-time watermark, groups already emitted
// beyond the commit) is written to the compacted state topic, so a restarted
// or newly assigned processor continues exactly where the old one stood,
// emitting at most identical duplicates of samples it cannot know were
// written. See docs/guarantees.md.
type AdvantageStage struct {
	cfg  Config
	prod *producers.Producer
	log  zerolog.Logger

	mu        sync.Mutex
	positions map[int]Position

	follower *policy.Follower // policy versions (staleness.go); nil when not followed
	seen     versionSeen      // newest trajectory policy version emitted (signals.go)
	buffers  *bufferPool      // encoded samples, recycled once acknowledged
	// scored decodes scored records with their token arrays left in the
	// record's bytes (schemas.WithSharedInput): a member's record is held
	// with its decoded value until its group closes, so the bytes outlive
	// every use of the arrays, and nothing here writes into them.
	scored schemas.Codec[schemas.Scored]
	method credit.Method // the configured credit method (credit.Lookup)
	groupRef
}

// Position is where a partition of the advantage stage stands.
type Position struct {
	Next        int64 // next offset to read
	Committable int64 // every offset below is finished and acknowledged
	OpenGroups  int
	InFlight    int // output writes not yet acknowledged
}

// Positions reports each owned partition's position as of its last
// checkpoint (see Config.CommitInterval).
func (a *AdvantageStage) Positions() map[int]Position {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[int]Position, len(a.positions))
	for k, v := range a.positions {
		out[k] = v
	}
	return out
}

// NewAdvantageStage checks cfg.
func NewAdvantageStage(cfg Config, prod *producers.Producer) (*AdvantageStage, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	method, _ := credit.Lookup(cfg.Credit.Method) // Check found it
	cfg.Metrics.forMethod(method)
	cfg.Metrics.unwritable.WithLabelValues("advantage") // exported at 0 from the start
	return &AdvantageStage{cfg: cfg, prod: prod, log: cfg.Logger.With().Str("stage", "advantage").Logger(), groupRef: newGroupRef(),
		positions: map[int]Position{}, buffers: newBufferPool(outputBufferBytes),
		scored: schemas.ScoredRecords(schemas.WithSharedInput()), method: method}, nil
}

// Run consumes until ctx ends.
func (a *AdvantageStage) Run(ctx context.Context) error {
	a.startPolicy(ctx)
	g, err := consumers.NewGroup(consumers.Config{
		Brokers: a.cfg.Brokers, GroupID: a.cfg.GroupID + ".advantage", Topics: []string{a.cfg.Topics.Scored},
		Security: a.cfg.Security, StartAt: "earliest", Buffer: 256, SessionTimeout: a.cfg.SessionTimeout,
		MaxBytes: a.cfg.fetchBytes(), Reassembly: a.cfg.reassembly("advantage", a.prod, a.log),
	}, consumers.WithLogger(a.log), consumers.WithRegisterer(a.cfg.Metrics.reg))
	if err != nil {
		return err
	}
	defer g.Close()
	a.store(g)
	return g.Run(ctx, a.claim)
}

type nopGauge struct{}

func (nopGauge) Set(float64) {}

// ack reports that one write of an emission ended: acknowledged when err is nil.
type ack struct {
	e   *emission
	err error
}

// emission is what one group's samples (or one call's dead letters) settle
// once every write of them is acknowledged: its close event, its input
// offsets, and when its first member was read (the latency metric).
type emission struct {
	ev      *state.CloseEvent
	offsets []int64
	started time.Time
	writes  int // handed to send, not yet acknowledged
}

// partition is the advantage stage's I/O around the core of one claimed
// partition (state.Partition: its groups, ledger and EMA baseline).
type partition struct {
	a        *AdvantageStage
	claim    consumers.Claim
	log      zerolog.Logger
	core     *state.Partition[entry, *finalized]
	baseline interface{ Set(float64) }
	lastRead time.Time       // processing time of the last record (idle)
	out      output          // samples and dead letters on their way to the broker (advantage_output.go)
	window   decodedWindow   // open members' bytes and decoded records (decoded.go)
	snap     snapshotMark    // the snapshot last written (checkpoint)
	scratch  samples.Scratch // the arrays of the sample being built (writeSamples)
}

func (a *AdvantageStage) claim(ctx context.Context, claim consumers.Claim, commit consumers.CommitFunc) error {
	log := a.log.With().Str("topic", claim.Topic).Int("partition", claim.Partition).Logger()
	key := state.SnapshotKey(a.cfg.GroupID+".advantage", claim.Topic, claim.Partition)
	snap, err := a.loadSnapshot(ctx, key)
	if err != nil {
		return err
	}
	p := &partition{
		a: a, claim: claim, log: log, lastRead: time.Now(), baseline: nopGauge{}, snap: snapshotMark{key: key},
		out: output{acks: make(chan ack, 1024), sem: make(chan struct{}, 512), unacked: newWindow(a.cfg.MaxUnackedBytes, minUnackedGroups)},
	}
	var resume int64
	p.core, resume = state.NewStream(claim.Topic, claim.Partition, claim.StartOffset, snap, a.cfg.Window, p.compute)
	if a.method.Baseline {
		part := strconv.Itoa(claim.Partition)
		p.baseline = a.cfg.Metrics.attnBaseline.WithLabelValues(part)
		// The partition may move to another member, which exports its
		// baseline from then on.
		defer a.cfg.Metrics.attnBaseline.DeleteLabelValues(part)
	}
	emitCtx, cancelEmit := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelEmit()
	p.out.emitCtx = emitCtx
	p.out.claimCtx = ctx
	ema := p.core.EMA()
	if snap != nil {
		log.Info().Int64("resume", resume).Float64("ema", ema.Value).Int64("ema_batches", ema.Count).
			Int("emitted_ahead", len(snap.Emitted)).Msg("partition assigned; state restored")
	} else {
		if claim.StartOffset > 0 {
			a.cfg.Metrics.resets.Inc()
			log.Error().Int64("start_offset", claim.StartOffset).Msg("partition assigned past its start but no state snapshot was found: the EMA baseline starts over")
		} else {
			log.Info().Msg("partition assigned; fresh state")
		}
	}
	if ema.Count > 0 {
		p.baseline.Set(ema.Value)
	}

	ticker := time.NewTicker(a.cfg.CommitInterval)
	defer ticker.Stop()
	records := claim.Records
	for records != nil {
		p.flushIdle(records)
		select {
		case rec, ok := <-records:
			if !ok {
				records = nil
				break
			}
			if rec.Offset < p.core.Next() {
				continue // covered by the snapshot
			}
			p.handle(rec)
		case k := <-p.out.acks:
			p.acked(k)
		case <-ticker.C:
			p.idle()
			p.checkpoint(ctx, commit)
		case <-ctx.Done():
			records = nil
		}
	}
	// Generation over: let in-flight writes finish for a moment, then write
	// the snapshot so the next owner starts where this one stands.
	p.flush()
	deadline := time.After(5 * time.Second)
drain:
	for len(p.out.sem) > 0 {
		select {
		case k := <-p.out.acks:
			p.acked(k)
		case <-deadline:
			break drain
		}
	}
	for len(p.out.acks) > 0 {
		p.acked(<-p.out.acks)
	}
	p.checkpoint(context.Background(), commit)
	log.Info().Int("open_groups", p.core.Open()).Int("pending", p.core.Pending()).Msg("partition released")
	return nil
}
