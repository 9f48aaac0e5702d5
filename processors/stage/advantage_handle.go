package stage

// The advantage stage's path of one record: decode, hand it to the
// partition core (state.Partition), act on each decision it returns.

import (
	"fmt"
	"sort"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/samples"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
)

// handle processes one record in offset order: decode → core.Handle → for
// each decision, act.
func (p *partition) handle(rec consumers.Record) {
	p.a.cfg.Metrics.recordsIn.WithLabelValues("advantage").Inc()
	now := time.Now()
	p.lastRead = now
	sc, err := p.decode(rec)
	if err != nil {
		p.core.Reject(rec.Offset)
		reason, detail := reasonOf(err)
		p.deadLetters([]consumers.Record{rec}, reason, detail, nil)
		return
	}
	t := &sc.Trajectory
	for _, d := range p.core.Handle(t.PromptID, int(t.GroupSize), state.Member[entry]{
		TrajectoryID: t.TrajectoryID, Offset: rec.Offset, EventMs: t.CreatedAtMs,
		Value: entry{rec: rec, sampleIndex: t.SampleIndex, read: now, scored: sc},
	}) {
		p.act(d)
	}
}

// decode decodes and validates a scored record: its fields (schemas), then
// what the credit method needs of it.
func (p *partition) decode(rec consumers.Record) (*schemas.Scored, error) {
	sc, err := p.a.scored.Decode(rec.Value)
	if err != nil {
		return nil, err
	}
	lim := p.a.cfg.Limits
	lim.VocabSize = 0 // token ranges were checked against the scorer's vocabulary by the score stage
	lim.Method = string(p.a.cfg.Credit.Method)
	if err := schemas.ValidateScored(sc, lim); err != nil {
		return nil, err
	}
	if err := credit.ValidateMember(samples.Member(sc), p.a.cfg.Credit); err != nil {
		return nil, err
	}
	return sc, nil
}

// idle advances event time by processing time on an idle partition.
func (p *partition) idle() {
	after := p.a.cfg.IdleAfter
	if after <= 0 || p.core.Open() == 0 {
		return
	}
	quiet := time.Since(p.lastRead)
	if quiet < after {
		return
	}
	ds := p.core.Idle(quiet.Milliseconds())
	closed := 0
	for _, d := range ds {
		if d.Action != state.Replayed {
			closed++
		}
	}
	if closed > 0 {
		p.log.Info().Int("groups", closed).Dur("idle_ms", quiet).Msg("idle partition: windows closed by processing time")
	}
	for _, d := range ds {
		p.act(d)
	}
}

// act carries out one decision of the partition core.
func (p *partition) act(d state.Decision[entry, *finalized]) {
	m := p.a.cfg.Metrics
	switch d.Action {
	case state.Hold:
		// The member waits in its open group: count its bytes, keep its
		// decoded record while it is among the most recent (decoded.go).
		i := len(d.Group.Members) - 1
		d.Group.Members[i].Value.held = true
		n := len(d.Member.Value.rec.Value)
		p.window.held += n
		p.keepDecoded(decodedRef{g: d.Group, i: i, offset: d.Member.Offset, n: n})
	case state.DuplicateMember:
		m.duplicates.Inc()
	case state.LateMember:
		p.deadLetters([]consumers.Record{d.Member.Value.rec}, schemas.ReasonLate,
			"group "+d.Member.Value.scored.Trajectory.PromptID+" closed before this member arrived", nil)
	case state.SizeMismatchMember:
		p.deadLetters([]consumers.Record{d.Member.Value.rec}, schemas.ReasonGroupSizeMismatch,
			fmt.Sprintf("group_size %d, the group's first member said %d", d.Member.Value.scored.Trajectory.GroupSize, d.Group.GroupSize), nil)
	case state.Finalize:
		p.release(d.Group)
		p.writeSamples(d)
	case state.Refused:
		p.release(d.Group)
		recs := make([]consumers.Record, len(d.Result.members))
		for i, mb := range d.Result.members {
			recs[i] = mb.Value.rec
		}
		p.deadLetters(recs, schemas.ReasonInvalid, "group "+d.Group.PromptID+": "+d.Err.Error(), d.Close)
	case state.Incomplete:
		p.release(d.Group)
		g := d.Group
		m.groups.WithLabelValues("incomplete").Inc()
		recs := make([]consumers.Record, len(g.Members))
		for i, mb := range g.Members {
			recs[i] = mb.Value.rec
		}
		p.deadLetters(recs, schemas.ReasonGroupIncomplete,
			fmt.Sprintf("group %s timed out with %d of %d members (minimum %d)", g.PromptID, len(g.Members), g.GroupSize, p.a.cfg.Window.MinGroupSize), d.Close)
	case state.Replayed:
		if ema := d.Close.EMAAfter; d.Close.Finalized && ema.Count > 0 {
			p.baseline.Set(ema.Value)
		}
	}
}

// finalized is a closing group's computation: its members in output order
// (sample index, trajectory id), their decoded records and credit members,
// and their results.
type finalized struct {
	members []state.Member[entry]
	scs     []*schemas.Scored
	cms     []credit.Member
	results []credit.Result
}

// compute is the partition core's Compute: the group computation of the
// configured credit method on a closing group. Members out of the decoded
// window are decoded again (handle decoded and validated every record).
func (p *partition) compute(g *state.Group[entry], partial bool, ema *credit.EMA) (*finalized, float64, error) {
	// Output order (sample index, trajectory id). The numbers depend on no
	// order: credit.ComputeGroup sums over the members in trajectory_id order.
	f := &finalized{members: append([]state.Member[entry](nil), g.Members...)}
	sort.SliceStable(f.members, func(i, j int) bool {
		a, b := f.members[i], f.members[j]
		if a.Value.sampleIndex != b.Value.sampleIndex {
			return a.Value.sampleIndex < b.Value.sampleIndex
		}
		return a.TrajectoryID < b.TrajectoryID
	})
	f.scs = make([]*schemas.Scored, len(f.members))
	f.cms = make([]credit.Member, len(f.members))
	for i, mb := range f.members {
		if f.scs[i] = mb.Value.scored; f.scs[i] == nil {
			var err error
			if f.scs[i], err = p.a.scored.Decode(mb.Value.rec.Value); err != nil {
				return f, 0, err
			}
		}
		f.cms[i] = samples.Member(f.scs[i])
	}
	// Every member passed credit.ValidateMember when it arrived (decode).
	results, err := credit.ComputeValidatedGroup(f.cms, partial, p.a.cfg.Credit, ema)
	if err != nil {
		return f, 0, err
	}
	f.results = results
	mean := 0.0
	for _, r := range results {
		mean += r.Reward
	}
	return f, mean / float64(len(results)), nil
}

// writeSamples writes a finalized group's samples.
func (p *partition) writeSamples(d state.Decision[entry, *finalized]) {
	cfg := p.a.cfg
	m := cfg.Metrics
	g, f := d.Group, d.Result
	outcome := "complete"
	if d.Partial {
		outcome = "partial"
	}
	m.groups.WithLabelValues(outcome).Inc()
	m.groupWait.Observe(time.Since(g.Members[0].Value.read).Seconds())
	e := &emission{ev: d.Close, offsets: memberOffsets(g), started: g.Members[0].Value.read}
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
	for i, r := range f.results {
		smp := samples.Build(f.scs[i], f.cms[i], r, cfg.Credit, &p.scratch)
		b, err := encodeSample(p.a.buffers.get(), &smp)
		if err != nil {
			// Never lost: the member's scored record goes to the dead-letter topic
			// with the reason, in the same emission as the group's samples, so the
			// offsets are committed only once it is acknowledged too.
			p.log.Error().Err(err).Str("trajectory_id", r.TrajectoryID).Msg("encode sample: dead-lettered")
			dl, dlErr := cfg.deadLetter("advantage", f.members[i].Value.rec, schemas.ReasonUnencodable, "sample "+r.TrajectoryID+": "+err.Error())
			if dlErr != nil {
				p.log.Error().Err(dlErr).Int64("offset", f.members[i].Value.rec.Offset).Msg("encode dead letter")
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
		if pending += len(b); pending >= emitEachBytes && i < len(f.results)-1 {
			p.send(msgs, e, true)
			msgs, pending = nil, 0
		}
	}
	p.a.signals(f.scs, f.results, route.announced)
	if ema := d.Close.EMAAfter; p.a.method.Baseline && ema.Count > 0 {
		p.baseline.Set(ema.Value)
	}
	p.send(msgs, e, true)
}

func memberOffsets(g *state.Group[entry]) []int64 {
	offs := make([]int64, len(g.Members))
	for i, m := range g.Members {
		offs[i] = m.Offset
	}
	return offs
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
