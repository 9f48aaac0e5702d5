package monitor

import (
	"sort"

	"github.com/creditflow/creditflow/schemas"
)

// SampleRef is where a sample lies and its headline numbers: a row of GET
// /api/v1/samples. The sample itself is not kept; it is read again from
// (topic, partition, offset) when asked for.
type SampleRef struct {
	TrajectoryID string `json:"trajectory_id"`
	Topic        string `json:"topic"`
	// Partition and Offset locate the record; Partition is -1 for a sample
	// added without a location (Aggregator.Add).
	Partition     int     `json:"partition"`
	Offset        int64   `json:"offset"`
	Reward        float64 `json:"reward"`
	Method        string  `json:"method"`
	Output        string  `json:"output"`
	PromptID      string  `json:"prompt_id"`
	GroupSize     int32   `json:"group_size"`
	SampleIndex   int32   `json:"sample_index"`
	PolicyVersion int64   `json:"policy_version"`
	CreatedAtMs   int64   `json:"created_at_ms"`
	// OutcomeAdvantage is A_out.
	OutcomeAdvantage float64 `json:"outcome_advantage"`
	// Process is the sample's process credit: LAPO Σ A_proc over its turns,
	// AttnSR Σ s_k (the step rewards); null when it has neither.
	Process *float64 `json:"process"`
	Tokens  int      `json:"tokens"`
	Turns   int      `json:"turns"`
	seq     uint64   // arrival order: ties and "recent"
}

// Orders of GET /api/v1/samples.
const (
	OrderRecent = "recent"
	OrderBest   = "best"
	OrderWorst  = "worst"
)

// Keys the best and worst lists rank by.
const (
	ByReward  = "reward"
	ByProcess = "process"
)

// refOf returns the headline numbers of s.
func refOf(topic string, s *schemas.Sample, partition int, offset int64) SampleRef {
	r := SampleRef{TrajectoryID: s.TrajectoryID, Topic: topic, Partition: partition, Offset: offset, Reward: s.Reward,
		Method: s.Method, Output: s.Output, PromptID: s.PromptID, GroupSize: s.GroupSize, SampleIndex: s.SampleIndex,
		PolicyVersion: s.PolicyVersion, CreatedAtMs: s.CreatedAtMs, OutcomeAdvantage: s.OutcomeAdvantage,
		Tokens: len(s.Tokens), Turns: len(s.Turns)}
	var proc float64
	has := false
	for i := range s.Turns {
		d := &s.Turns[i]
		if d.Eligible && d.Delta != nil {
			proc += d.ProcessAdvantage
			has = true
		}
		if d.StepReward != nil {
			proc += *d.StepReward
			has = true
		}
	}
	if has {
		r.Process = &proc
	}
	return r
}

// ranked is a bounded list of refs kept sorted best first by key (higher
// is better when high, lower when not), ties by arrival.
type ranked struct {
	refs []SampleRef
	max  int
	key  func(*SampleRef) (float64, bool)
	high bool
}

func (r *ranked) before(a, b *SampleRef) bool {
	ka, _ := r.key(a)
	kb, _ := r.key(b)
	if ka != kb {
		if r.high {
			return ka > kb
		}
		return ka < kb
	}
	return a.seq < b.seq
}

// add keeps ref if it ranks among the max best.
func (r *ranked) add(ref *SampleRef) {
	if _, ok := r.key(ref); !ok {
		return
	}
	n := len(r.refs)
	if n == r.max && !r.before(ref, &r.refs[n-1]) {
		return
	}
	i := sort.Search(n, func(i int) bool { return r.before(ref, &r.refs[i]) })
	if n < r.max {
		r.refs = append(r.refs, SampleRef{})
	}
	copy(r.refs[i+1:], r.refs[i:])
	r.refs[i] = *ref
}

func rewardKey(r *SampleRef) (float64, bool) { return r.Reward, true }
func processKey(r *SampleRef) (float64, bool) {
	if r.Process == nil {
		return 0, false
	}
	return *r.Process, true
}

// loc is a kept record location packed in 64 bits: the partition in the
// top 16, the offset in the low 48 (a partition holds far fewer than 2⁴⁸
// records).
type loc uint64

func packLoc(partition int, offset int64) loc {
	return loc(uint64(partition)<<48 | uint64(offset)&(1<<48-1))
}
func (l loc) partition() int { return int(l >> 48) }
func (l loc) offset() int64  { return int64(l & (1<<48 - 1)) }

// kept is one topic's bounded set of kept samples: the most recent, the
// best and worst by reward and by process credit, and the locations of the
// last ids seen (for lookups by trajectory_id).
type kept struct {
	recent     []SampleRef // ring
	pos        int
	best, wors [2]*ranked // [ByReward, ByProcess]
	index      map[uint64]loc
	ring       []uint64
	ipos       int
	ifull      bool
}

func newKept(samples, ids int) *kept {
	k := &kept{recent: make([]SampleRef, 0, samples), index: make(map[uint64]loc, ids), ring: make([]uint64, ids)}
	for i, key := range []func(*SampleRef) (float64, bool){rewardKey, processKey} {
		k.best[i] = &ranked{max: samples, key: key, high: true}
		k.wors[i] = &ranked{max: samples, key: key}
	}
	return k
}

// add keeps ref, whose seq the caller set.
func (k *kept) add(ref SampleRef) {
	if len(k.recent) < cap(k.recent) {
		k.recent = append(k.recent, ref)
	} else {
		k.recent[k.pos] = ref
		k.pos = (k.pos + 1) % len(k.recent)
	}
	for i := range k.best {
		k.best[i].add(&ref)
		k.wors[i].add(&ref)
	}
	if ref.Partition < 0 || ref.Partition >= 1<<16 || ref.Offset < 0 || ref.Offset >= 1<<48 {
		return // no location, or one that does not pack: found by reading the partition
	}
	h := hashID(ref.TrajectoryID)
	if _, ok := k.index[h]; !ok {
		if k.ifull {
			delete(k.index, k.ring[k.ipos])
		}
		k.ring[k.ipos] = h
		k.ipos++
		if k.ipos == len(k.ring) {
			k.ipos, k.ifull = 0, true
		}
	}
	k.index[h] = packLoc(ref.Partition, ref.Offset)
}

// list returns up to limit refs in the given order, by ByReward or ByProcess.
func (k *kept) list(order, by string, limit int) []SampleRef {
	var src []SampleRef
	i := 0
	if by == ByProcess {
		i = 1
	}
	switch order {
	case OrderBest:
		src = k.best[i].refs
	case OrderWorst:
		src = k.wors[i].refs
	default: // recent: newest first
		n := len(k.recent)
		src = make([]SampleRef, 0, n)
		for j := 0; j < n; j++ {
			src = append(src, k.recent[(k.pos+n-1-j)%n])
		}
	}
	if limit < len(src) {
		src = src[:limit]
	}
	return append([]SampleRef(nil), src...)
}

// Samples returns up to limit kept samples of topic (every topic when
// topic is ""), in order OrderRecent (newest first), OrderBest or
// OrderWorst (by ByReward or ByProcess; ties: earlier arrival first).
func (a *Aggregator) Samples(topic, order, by string, limit int) []SampleRef {
	a.mu.Lock()
	var out []SampleRef
	for _, t := range a.topics {
		if topic == "" || t.name == topic {
			out = append(out, t.kept.list(order, by, limit)...)
		}
	}
	a.mu.Unlock()
	if topic == "" && len(a.topics) > 1 {
		key := rewardKey
		if by == ByProcess {
			key = processKey
		}
		rk := &ranked{key: key, high: order == OrderBest}
		sort.SliceStable(out, func(i, j int) bool {
			if order == OrderBest || order == OrderWorst {
				return rk.before(&out[i], &out[j])
			}
			return out[i].seq > out[j].seq
		})
		if limit < len(out) {
			out = out[:limit]
		}
	}
	return out
}

// Locate returns where the sample trajectoryID of topic was read, if it
// is among the ids remembered (Config.KeepIDs).
func (a *Aggregator) Locate(topic, trajectoryID string) (partition int, offset int64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.byName[topic]
	if t == nil {
		return 0, 0, false
	}
	l, ok := t.kept.index[hashID(trajectoryID)]
	return l.partition(), l.offset(), ok
}

// topicNames returns the topics in the order they were added.
func (a *Aggregator) topicNames() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, len(a.topics))
	for i, t := range a.topics {
		out[i] = t.name
	}
	return out
}
