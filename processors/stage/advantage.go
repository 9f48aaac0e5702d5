package stage

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/credit"
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
	cfg.Metrics.forMethod(cfg.Credit.Method)
	cfg.Metrics.unwritable.WithLabelValues("advantage") // exported at 0 from the start
	return &AdvantageStage{cfg: cfg, prod: prod, log: cfg.Logger.With().Str("stage", "advantage").Logger(), groupRef: newGroupRef(),
		positions: map[int]Position{}, buffers: newBufferPool(outputBufferBytes),
		scored: schemas.ScoredRecords(schemas.WithSharedInput())}, nil
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

// partition is the advantage stage's state for one claimed partition.
type partition struct {
	a        *AdvantageStage
	claim    consumers.Claim
	log      zerolog.Logger
	ledger   *state.Ledger
	groups   *state.Groups[entry]
	ema      credit.EMA
	baseline interface{ Set(float64) }

	acks         chan ack
	sem          chan struct{}
	unacked      *window         // encoded bytes handed to the producer, not yet acknowledged
	claimCtx     context.Context // ends when the partition is released
	emitCtx      context.Context
	lastRead     time.Time // processing time of the last record
	lastWM       int64     // watermark at the last record
	next         int64     // next offset expected
	snapKey      string
	decoded      []decodedRef // members holding a decoded record, oldest first
	decodedBytes int
	heldBytes    int // record bytes of the open members (entry.held)
	lastSnap     []byte
	lastSnapAt   time.Time
	scratch      sampleScratch // the arrays of the sample being built (finalize)
	queued       []queuedSend  // sends not yet handed to the producer (send, flush)
	queuedBytes  int
}

func (a *AdvantageStage) claim(ctx context.Context, claim consumers.Claim, commit consumers.CommitFunc) error {
	log := a.log.With().Str("topic", claim.Topic).Int("partition", claim.Partition).Logger()
	key := state.SnapshotKey(a.cfg.GroupID+".advantage", claim.Topic, claim.Partition)
	snap, err := a.loadSnapshot(ctx, key)
	if err != nil {
		return err
	}
	ledger, resume := state.NewLedger(claim.Topic, claim.Partition, claim.StartOffset, snap)
	p := &partition{
		a: a, claim: claim, log: log, ledger: ledger,
		groups:   state.NewGroups[entry](a.cfg.Window),
		acks:     make(chan ack, 1024),
		sem:      make(chan struct{}, 512),
		unacked:  newWindow(a.cfg.MaxUnackedBytes, minUnackedGroups),
		lastRead: time.Now(),
		next:     resume,
		snapKey:  key,
		baseline: nopGauge{},
	}
	if a.cfg.Credit.Method == credit.MethodAttnSR {
		part := strconv.Itoa(claim.Partition)
		p.baseline = a.cfg.Metrics.attnBaseline.WithLabelValues(part)
		// The partition may move to another member, which exports its
		// baseline from then on.
		defer a.cfg.Metrics.attnBaseline.DeleteLabelValues(part)
	}
	emitCtx, cancelEmit := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelEmit()
	p.emitCtx = emitCtx
	p.claimCtx = ctx
	if snap != nil {
		base := ledger.BaseEMA()
		p.ema = credit.EMA{Value: base.Value, Count: base.Count}
		p.groups.SetWatermark(ledger.BaseWatermark())
		for _, c := range snap.Closed {
			p.groups.Remember(c)
		}
		for _, e := range snap.Emitted {
			p.groups.Remember(state.ClosedGroup{PromptID: e.PromptID, Members: e.Members})
		}
		log.Info().Int64("resume", resume).Float64("ema", p.ema.Value).Int64("ema_batches", p.ema.Count).
			Int("emitted_ahead", len(snap.Emitted)).Msg("partition assigned; state restored")
	} else {
		if claim.StartOffset > 0 {
			a.cfg.Metrics.resets.Inc()
			log.Error().Int64("start_offset", claim.StartOffset).Msg("partition assigned past its start but no state snapshot was found: the EMA baseline starts over")
		} else {
			log.Info().Msg("partition assigned; fresh state")
		}
	}
	p.lastWM = p.groups.Watermark()
	if p.ema.Count > 0 {
		p.baseline.Set(p.ema.Value)
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
			if rec.Offset < p.next {
				continue // covered by the snapshot
			}
			p.handle(rec)
		case k := <-p.acks:
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
	for len(p.sem) > 0 {
		select {
		case k := <-p.acks:
			p.acked(k)
		case <-deadline:
			break drain
		}
	}
	for len(p.acks) > 0 {
		p.acked(<-p.acks)
	}
	p.checkpoint(context.Background(), commit)
	log.Info().Int("open_groups", p.groups.Open()).Int("pending", p.ledger.Pending()).Msg("partition released")
	return nil
}

// handle processes one record in offset order.
func (p *partition) handle(rec consumers.Record) {
	m := p.a.cfg.Metrics
	m.recordsIn.WithLabelValues("advantage").Inc()
	p.next = rec.Offset + 1
	now := time.Now()
	p.lastRead = now
	sc, err := p.a.scored.Decode(rec.Value)
	if err == nil {
		lim := p.a.cfg.Limits
		lim.VocabSize = 0 // token ranges were checked against the scorer's vocabulary by the score stage
		err = schemas.ValidateScored(sc, lim)
	}
	if err == nil {
		err = credit.ValidateMember(member(sc), p.a.cfg.Credit)
	}
	if err != nil {
		p.ledger.Read(rec.Offset, p.groups.Watermark())
		reason, detail := reasonOf(err)
		p.deadLetters([]consumers.Record{rec}, reason, detail, nil)
		return
	}
	t := &sc.Trajectory
	p.ledger.Read(rec.Offset, t.CreatedAtMs)

	// Closes that happen before this record joins: event-time expiries, and
	// closes a previous owner already emitted here.
	expired := p.groups.Observe(t.CreatedAtMs)
	p.lastWM = p.groups.Watermark()
	p.closeBefore(rec.Offset, expired)

	verdict, grp := p.groups.Add(t.PromptID, int(t.GroupSize), state.Member[entry]{
		TrajectoryID: t.TrajectoryID, Offset: rec.Offset, EventMs: t.CreatedAtMs,
		Value: entry{rec: rec, sampleIndex: t.SampleIndex, read: now, scored: sc},
	})
	switch verdict {
	case state.Added:
		grp.Members[len(grp.Members)-1].Value.held = true
		p.heldBytes += len(rec.Value)
		p.keepDecoded(decodedRef{g: grp, i: len(grp.Members) - 1, offset: rec.Offset, n: len(rec.Value)})
	case state.Duplicate:
		m.duplicates.Inc()
		p.ledger.Done(rec.Offset)
	case state.Late:
		p.deadLetters([]consumers.Record{rec}, schemas.ReasonLate, "group "+t.PromptID+" closed before this member arrived", nil)
	case state.SizeMismatch:
		p.deadLetters([]consumers.Record{rec}, schemas.ReasonGroupSizeMismatch,
			fmt.Sprintf("group_size %d, the group's first member said %d", t.GroupSize, grp.GroupSize), nil)
	case state.Completed:
		p.finalize(grp, false, rec.Offset, state.PhaseAfter)
	}
	for _, e := range p.ledger.Replays(rec.Offset, state.PhaseAfter) {
		p.replayed(e)
	}
}

// closeBefore handles the closes at offset off that come before its record:
// freshly expired groups and replayed ones, in first-member order.
func (p *partition) closeBefore(off int64, expired []state.Expired[entry]) {
	replays := p.ledger.Replays(off, state.PhaseBefore)
	i, j := 0, 0
	for i < len(expired) || j < len(replays) {
		if j >= len(replays) || (i < len(expired) && expired[i].Group.FirstOffset < replays[j].FirstOffset) {
			e := expired[i]
			i++
			if e.Partial {
				p.finalize(e.Group, true, off, state.PhaseBefore)
			} else {
				p.incomplete(e.Group, off)
			}
			continue
		}
		p.replayed(replays[j])
		j++
	}
}

// replayed applies a close that a previous owner already emitted.
func (p *partition) replayed(e state.CloseEvent) {
	if e.Finalized {
		p.ema = credit.EMA{Value: e.EMAAfter.Value, Count: e.EMAAfter.Count}
		if p.ema.Count > 0 {
			p.baseline.Set(p.ema.Value)
		}
	}
	p.groups.Remember(state.ClosedGroup{PromptID: e.PromptID, Members: e.Members})
	p.ledger.Close(e, true)
}

// idle advances event time by processing time on an idle partition.
func (p *partition) idle() {
	after := p.a.cfg.IdleAfter
	if after <= 0 || p.groups.Open() == 0 {
		return
	}
	quiet := time.Since(p.lastRead)
	if quiet < after {
		return
	}
	expired := p.groups.AdvanceIdle(p.lastWM + quiet.Milliseconds())
	if len(expired) > 0 {
		p.log.Info().Int("groups", len(expired)).Dur("idle_ms", quiet).Msg("idle partition: windows closed by processing time")
	}
	p.closeBefore(p.next, expired)
}

func memberIDs(g *state.Group[entry]) []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.TrajectoryID
	}
	return ids
}

func memberOffsets(g *state.Group[entry]) []int64 {
	offs := make([]int64, len(g.Members))
	for i, m := range g.Members {
		offs[i] = m.Offset
	}
	return offs
}

// finalize computes a group's advantages and writes its samples.
func (p *partition) finalize(g *state.Group[entry], partial bool, off int64, phase string) {
	cfg := p.a.cfg
	m := cfg.Metrics
	p.release(g)
	// Output order (sample index, trajectory id). The numbers depend on no
	// order: credit.ComputeGroup sums over the members in trajectory_id order.
	members := append([]state.Member[entry](nil), g.Members...)
	sort.SliceStable(members, func(i, j int) bool {
		a, b := members[i], members[j]
		if a.Value.sampleIndex != b.Value.sampleIndex {
			return a.Value.sampleIndex < b.Value.sampleIndex
		}
		return a.TrajectoryID < b.TrajectoryID
	})
	// Members out of the decoded window are decoded again (handle decoded
	// and validated every record).
	scs := make([]*schemas.Scored, len(members))
	cms := make([]credit.Member, len(members))
	var err error
	for i, mb := range members {
		if scs[i] = mb.Value.scored; scs[i] == nil {
			if scs[i], err = p.a.scored.Decode(mb.Value.rec.Value); err != nil {
				break
			}
		}
		cms[i] = member(scs[i])
	}
	before := p.ema
	var results []credit.Result
	if err == nil {
		// Every member passed credit.ValidateMember when it arrived (handle).
		results, err = credit.ComputeValidatedGroup(cms, partial, cfg.Credit, &p.ema)
	}
	if err != nil {
		p.ema = before
		recs := make([]consumers.Record, len(members))
		for i, mb := range members {
			recs[i] = mb.Value.rec
		}
		ev := p.ledger.Close(state.CloseEvent{Offset: off, Phase: phase, FirstOffset: g.FirstOffset, PromptID: g.PromptID,
			Members: memberIDs(g), EMAAfter: state.EMAState{Value: p.ema.Value, Count: p.ema.Count}}, false)
		p.deadLetters(recs, schemas.ReasonInvalid, "group "+g.PromptID+": "+err.Error(), ev)
		return
	}
	mean := 0.0
	for _, r := range results {
		mean += r.Reward
	}
	mean /= float64(len(results))
	outcome := "complete"
	if partial {
		outcome = "partial"
	}
	m.groups.WithLabelValues(outcome).Inc()
	m.groupWait.Observe(time.Since(g.Members[0].Value.read).Seconds())
	ev := p.ledger.Close(state.CloseEvent{Offset: off, Phase: phase, FirstOffset: g.FirstOffset, PromptID: g.PromptID,
		Members: memberIDs(g), Finalized: true, BatchMean: mean,
		EMAAfter: state.EMAState{Value: p.ema.Value, Count: p.ema.Count}}, false)
	e := &emission{ev: ev, offsets: memberOffsets(g), started: g.Members[0].Value.read}
	// Samples are written as they are built once they are large (emitEachBytes):
	// the producer compresses and writes one while the next is built.
	var msgs []producers.Message
	pending := 0
	route := p.a.router()
	// Keyed by prompt_id, as trajectories and scored records are: a group's
	// samples share a partition (fresh and stale alike), so that trainers
	// reading the samples topic with one consumer group each get whole
	// groups (docs/trainers.md, "Several trainers in one consumer group").
	key := []byte(g.PromptID)
	for i, r := range results {
		smp := sample(scs[i], cms[i], r, cfg.Credit, &p.scratch)
		b, err := encodeSample(p.a.buffers.get(), &smp)
		if err != nil {
			// Never lost: the member's scored record goes to the dead-letter topic
			// with the reason, in the same emission as the group's samples, so the
			// offsets are committed only once it is acknowledged too.
			p.log.Error().Err(err).Str("trajectory_id", r.TrajectoryID).Msg("encode sample: dead-lettered")
			dl, dlErr := cfg.deadLetter("advantage", members[i].Value.rec, schemas.ReasonUnencodable, "sample "+r.TrajectoryID+": "+err.Error())
			if dlErr != nil {
				p.log.Error().Err(dlErr).Int64("offset", members[i].Value.rec.Offset).Msg("encode dead letter")
				continue
			}
			p.send([]producers.Message{dl}, e, false)
			continue
		}
		msgs = append(msgs, producers.Message{
			Topic: route.topic(smp.PolicyVersion, m), Key: key, Value: b,
			Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Samples().Name())}},
		})
		p.observe(r)
		if pending += len(b); pending >= emitEachBytes && i < len(results)-1 {
			p.send(msgs, e, true)
			msgs, pending = nil, 0
		}
	}
	p.a.signals(scs, results, route.announced)
	if cfg.Credit.Method == credit.MethodAttnSR && p.ema.Count > 0 {
		p.baseline.Set(p.ema.Value)
	}
	p.send(msgs, e, true)
}

// encodeSample encodes a sample for the samples topic (a variable so that a
// test can make it fail).
var encodeSample = func(dst []byte, s *schemas.Sample) ([]byte, error) { return schemas.Samples().AppendEncode(dst, s) }

// emitEachBytes: once a group's samples built and not yet handed to the
// producer reach this many bytes, they are written before the next sample is
// built, rather than all of the group's samples in one call at its end. Small
// samples (search-QA: 17 KB, five to a group) go as one send per group, and
// the sends of the groups finalized while records wait go to the producer
// together (send); long trajectories' samples (32k tokens: 425 KB) go one by
// one, each at once.
const emitEachBytes = 256 << 10

// incomplete dead-letters the members of a group that timed out too small.
func (p *partition) incomplete(g *state.Group[entry], off int64) {
	p.a.cfg.Metrics.groups.WithLabelValues("incomplete").Inc()
	recs := make([]consumers.Record, len(g.Members))
	for i, mb := range g.Members {
		recs[i] = mb.Value.rec
	}
	ev := p.ledger.Close(state.CloseEvent{Offset: off, Phase: state.PhaseBefore, FirstOffset: g.FirstOffset, PromptID: g.PromptID,
		Members: memberIDs(g), EMAAfter: state.EMAState{Value: p.ema.Value, Count: p.ema.Count}}, false)
	p.deadLetters(recs, schemas.ReasonGroupIncomplete,
		fmt.Sprintf("group %s timed out with %d of %d members (minimum %d)", g.PromptID, len(g.Members), g.GroupSize, p.a.cfg.Window.MinGroupSize), ev)
}

// observe feeds the process-signal metrics. The labelled counters are
// tallied over the record's turns first and looked up once per label (a
// lookup per turn costs the AttnSR advantage stage at K = 30: docs/performance-passes.md).
func (p *partition) observe(r credit.Result) {
	m := p.a.cfg.Metrics
	var delta, step [3]int // positive, negative, zero
	var gate [2]int        // pass, fail
	sign := func(x float64) int {
		switch {
		case x > 0:
			return 0
		case x < 0:
			return 1
		}
		return 2
	}
	for _, t := range r.Turns {
		if t.Eligible && t.Delta != nil {
			delta[sign(*t.Delta)]++
			if t.Gate == 1 {
				gate[0]++
			} else {
				gate[1]++
			}
			pa := t.ProcessAdvantage
			if pa < 0 {
				pa = -pa
			}
			m.lapoProcAbs.Observe(pa)
		}
		if t.StepReward != nil {
			step[sign(*t.StepReward)]++
		}
	}
	signs := [3]string{"positive", "negative", "zero"}
	for i, n := range delta {
		if n > 0 {
			m.lapoDelta.WithLabelValues(signs[i]).Add(float64(n))
		}
		if n := step[i]; n > 0 {
			m.stepRewards.WithLabelValues(signs[i]).Add(float64(n))
		}
	}
	for i, n := range gate {
		if n > 0 {
			m.lapoGate.WithLabelValues([2]string{"pass", "fail"}[i]).Add(float64(n))
		}
	}
	if s := r.AttnSR; s != nil {
		m.attnConfidence.Observe(s.Confidence)
		m.attnFocus.Observe(s.Focus)
		m.attnConsensus.Observe(s.Consensus)
		m.attnBudget.Observe(s.Budget)
	}
}
