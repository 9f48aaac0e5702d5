package monitor

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

// maxReasons bounds the distinct dead-letter reasons kept; further ones are
// counted under "other".
const maxReasons = 64

// Aggregator folds samples and dead letters into bounded aggregates. It is
// safe for concurrent use: readers add, the server takes snapshots.
type Aggregator struct {
	mu      sync.Mutex
	cfg     Config
	topics  []*topicAgg
	byName  map[string]*topicAgg
	dead    map[string]int64
	changes uint64
	now     func() time.Time
	// announced is the newest version announced on the policy topic; -1
	// before any announcement (or when the topic is not followed).
	announced int64
	seq       uint64 // samples kept so far: their arrival order
}

// NewAggregator returns an empty aggregator over the given samples topics
// (more topics are added as their first record arrives).
func NewAggregator(cfg Config, topics ...string) *Aggregator {
	a := &Aggregator{cfg: cfg, byName: map[string]*topicAgg{}, dead: map[string]int64{}, now: time.Now, announced: -1}
	for _, t := range topics {
		a.topic(t)
	}
	return a
}

// topicAgg is the aggregate of one samples topic.
type topicAgg struct {
	name        string
	total       acc
	duplicates  int64
	undecodable int64
	newest      int64
	hasNewest   bool
	versions    map[int64]*acc
	droppedRows int64 // samples in no row kept: rows dropped, or older than every row kept
	sources     map[string]*acc
	seen        *idWindow
	open        *openGroups

	reward, advantage, outcomeAdv *hist
	tokens, turns, confidence     *hist
	age, lag, scorerLag           *hist
	events                        *eventSeries
	rate                          *rateRing
	kept                          *kept
}

func (a *Aggregator) topic(name string) *topicAgg {
	if t := a.byName[name]; t != nil {
		return t
	}
	c := a.cfg
	t := &topicAgg{
		name: name, versions: map[int64]*acc{}, sources: map[string]*acc{}, seen: newIDWindow(c.DedupeWindow), open: newOpenGroups(c.MaxOpenGroups),
		reward:     newHist(c.RewardMin, c.RewardMax, 20, false),
		advantage:  newHist(-3, 3, 60, false),
		outcomeAdv: newHist(-3, 3, 60, false),
		tokens:     newHist(0, 16384, 256, false),
		turns:      newHist(0, 128, 128, false),
		confidence: newHist(0, 1, 40, false),
		age:        newHist(0.01, 1e9, 44, true),
		lag:        newHist(0, 32, 32, false),
		scorerLag:  newHist(-8, 24, 32, false),
		events:     newEventSeries(),
		rate:       newRateRing(c.RateSeconds),
		kept:       newKept(c.KeepSamples, c.KeepIDs),
	}
	a.byName[name] = t
	a.topics = append(a.topics, t)
	return t
}

// AddRecord decodes one samples-topic record and adds it; an undecodable
// record is counted (Undecodable) and skipped. at is the record's timestamp
// (the time it was written); zero means unknown.
func (a *Aggregator) AddRecord(topic string, value []byte, at time.Time) error {
	return a.AddRecordAt(topic, -1, -1, value, at)
}

// AddRecordAt is AddRecord for the record at (partition, offset) of topic:
// the sample is kept by its location (GET /api/v1/samples), so that it can
// be read again.
func (a *Aggregator) AddRecordAt(topic string, partition int, offset int64, value []byte, at time.Time) error {
	s, err := schemas.Samples().Decode(value)
	if err != nil {
		a.mu.Lock()
		a.topic(topic).undecodable++
		a.changes++
		a.mu.Unlock()
		return err
	}
	a.AddAt(topic, partition, offset, s, at)
	return nil
}

// Add adds one decoded sample of topic whose location is unknown.
func (a *Aggregator) Add(topic string, s *schemas.Sample, at time.Time) {
	a.AddAt(topic, -1, -1, s, at)
}

// AddAt adds one decoded sample, the record at (partition, offset) of topic
// (partition -1: unknown).
func (a *Aggregator) AddAt(topic string, partition int, offset int64, s *schemas.Sample, at time.Time) {
	now := a.now()
	ref := refOf(topic, s, partition, offset)
	// Work that needs no shared state happens before the lock.
	var eligible, pos, neg, gate int64
	var absProc float64
	for i := range s.Turns {
		d := &s.Turns[i]
		if d.Eligible && d.Delta != nil {
			eligible++
			if *d.Delta > 0 {
				pos++
			} else if *d.Delta < 0 {
				neg++
			}
			gate += int64(d.Gate)
			absProc += math.Abs(d.ProcessAdvantage)
		}
	}
	success := s.Reward >= a.cfg.SuccessThreshold
	recMs := now.UnixMilli()
	if !at.IsZero() {
		recMs = at.UnixMilli()
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.topic(topic)
	if !t.seen.add(hashID(s.TrajectoryID)) {
		t.duplicates++
		a.changes++
		return
	}
	a.changes++
	a.seq++
	ref.seq = a.seq
	t.kept.add(ref)
	if !t.hasNewest || s.PolicyVersion > t.newest {
		t.newest, t.hasNewest = s.PolicyVersion, true
	}
	lag := float64(max(t.newest, a.announced) - s.PolicyVersion)
	one := acc{samples: 1, rewardSum: s.Reward, tokens: int64(len(s.Tokens)), turns: int64(len(s.Turns)),
		eligible: eligible, pos: pos, neg: neg, gate: gate, absProc: absProc, lagSum: lag}
	if success {
		one.successes = 1
	}
	if s.AttnSR != nil {
		one.attnN, one.confSum, one.baseSum = 1, s.AttnSR.Confidence, s.AttnSR.Baseline
		t.confidence.add(s.AttnSR.Confidence)
	}
	if s.ScorerPolicyVersion != nil && *s.ScorerPolicyVersion >= 0 { // -1: unknown
		sl := float64(*s.ScorerPolicyVersion - s.PolicyVersion)
		one.scorerN, one.scorerLagSum = 1, sl
		t.scorerLag.add(sl)
	}
	source := sourceOf(s)
	t.source(source, a.cfg.MaxSources).merge(&one)
	t.total.merge(&one)
	if v := t.version(s.PolicyVersion, a.cfg.MaxVersions); v != nil {
		v.merge(&one)
	} else {
		t.droppedRows++
	}

	t.reward.add(s.Reward)
	t.outcomeAdv.add(s.OutcomeAdvantage)
	if len(s.Advantages) == len(s.LossMask) {
		for i, m := range s.LossMask {
			if m == 1 {
				t.advantage.add(float64(s.Advantages[i]))
			}
		}
	}
	t.tokens.add(float64(len(s.Tokens)))
	t.turns.add(float64(len(s.Turns)))
	t.age.add(float64(recMs-s.CreatedAtMs) / 1000)
	t.lag.add(lag)
	b := t.events.bucket(s.CreatedAtMs)
	b.n++
	b.rewardSum += s.Reward
	if success {
		b.successes++
	}
	if s.AttnSR != nil {
		b.baselineN++
		b.baselineSum += s.AttnSR.Baseline
	}
	t.rate.add(now.Unix())

	done, evicted := t.open.member(s.PromptID, source, s.GroupSize, s.PolicyVersion, s.Partial, success, s.Reward, now.UnixMilli())
	t.closeGroup(done)
	t.closeGroup(evicted)
}

// version returns the row of policy version v, making room by dropping the
// oldest row; nil when v is older than every row kept and there is no room.
func (t *topicAgg) version(v int64, max int) *acc {
	if r := t.versions[v]; r != nil {
		return r
	}
	if len(t.versions) >= max {
		oldest := int64(math.MaxInt64)
		for k := range t.versions {
			oldest = min(oldest, k)
		}
		if v < oldest {
			return nil
		}
		t.droppedRows += t.versions[oldest].samples
		delete(t.versions, oldest)
	}
	r := &acc{}
	t.versions[v] = r
	return r
}

// NoSource is the source row of samples without a source.
const NoSource = "(none)"

func sourceOf(s *schemas.Sample) string {
	if s.Source == nil || *s.Source == "" {
		return NoSource
	}
	return *s.Source
}

// source returns the row of data source name; beyond max rows, "other".
func (t *topicAgg) source(name string, max int) *acc {
	if r := t.sources[name]; r != nil {
		return r
	}
	if len(t.sources) >= max-1 && name != "other" {
		return t.source("other", max+1)
	}
	r := &acc{}
	t.sources[name] = r
	return r
}

func (t *topicAgg) closeGroup(g *openGroup) {
	if g == nil {
		return
	}
	t.total.closeGroup(g)
	if r := t.sources[g.source]; r != nil {
		r.closeGroup(g)
	} else if r := t.sources["other"]; r != nil {
		r.closeGroup(g)
	}
	if v := t.versions[g.version]; v != nil {
		v.closeGroup(g)
	}
}

// AddDeadLetter counts one dead-letter record by its reason: the record's
// own reason field, else its reason header, else "undecodable_dead_letter".
func (a *Aggregator) AddDeadLetter(value []byte, headerReason string) {
	reason := headerReason
	if dl, err := schemas.DeadLetters().Decode(value); err == nil {
		reason = dl.Reason
	}
	if reason == "" {
		reason = "undecodable_dead_letter"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.dead[reason]; !ok && len(a.dead) >= maxReasons {
		reason = "other"
	}
	a.dead[reason]++
	a.changes++
}

// SetAnnounced takes the newest version announced on the policy topic into
// account: from then on a sample's policy lag is measured from the larger of
// it and the newest version seen in the sample's topic. An older version
// never moves it back.
func (a *Aggregator) SetAnnounced(v int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v > a.announced {
		a.announced = v
		a.changes++
	}
}

// Sweep closes the partial groups idle for longer than Config.GroupIdle.
func (a *Aggregator) Sweep() {
	cutoff := a.now().Add(-a.cfg.GroupIdle).UnixMilli()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.topics {
		for _, g := range t.open.idle(cutoff) {
			t.closeGroup(g)
			a.changes++
		}
	}
}

// Finish closes every open group: the end of a bounded read.
func (a *Aggregator) Finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.topics {
		for _, g := range t.open.all() {
			t.closeGroup(g)
			a.changes++
		}
	}
}

// Changes is a counter that moves whenever the aggregates do.
func (a *Aggregator) Changes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changes
}

func sortedVersions(m map[int64]*acc) []int64 {
	vs := make([]int64, 0, len(m))
	for v := range m {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs
}
