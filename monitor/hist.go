package monitor

import "math"

// hist is a fixed-bin histogram over [lo, hi]: linear bins, or logarithmic
// bins when log is set (then lo must be > 0). Each bin holds [edge, next
// edge), the last one also hi itself (a reward of exactly 1 is in range).
// Values below lo and above hi are counted in under and over. Its memory is
// fixed at construction.
type hist struct {
	lo, hi float64
	log    bool
	counts []int64
	under  int64
	over   int64
	n      int64
}

func newHist(lo, hi float64, bins int, log bool) *hist {
	return &hist{lo: lo, hi: hi, log: log, counts: make([]int64, bins)}
}

func (h *hist) add(x float64) { h.addN(x, 1) }

func (h *hist) addN(x float64, n int64) {
	if math.IsNaN(x) {
		return
	}
	h.n += n
	switch {
	case x < h.lo:
		h.under += n
	case x > h.hi:
		h.over += n
	default:
		var f float64
		if h.log {
			f = math.Log(x/h.lo) / math.Log(h.hi/h.lo)
		} else {
			f = (x - h.lo) / (h.hi - h.lo)
		}
		i := int(f * float64(len(h.counts)))
		i = min(max(i, 0), len(h.counts)-1)
		h.counts[i] += n
	}
}

// edges returns the len(counts)+1 bin edges.
func (h *hist) edges() []float64 {
	out := make([]float64, len(h.counts)+1)
	for i := range out {
		f := float64(i) / float64(len(h.counts))
		if h.log {
			out[i] = h.lo * math.Pow(h.hi/h.lo, f)
		} else {
			out[i] = h.lo + f*(h.hi-h.lo)
		}
	}
	return out
}

// HistView is a histogram as served to the page.
type HistView struct {
	Edges  []float64 `json:"edges"` // len(counts)+1
	Counts []int64   `json:"counts"`
	Under  int64     `json:"under"` // below the first edge
	Over   int64     `json:"over"`  // above the last edge
	Log    bool      `json:"log"`
}

func (h *hist) view() HistView {
	return HistView{Edges: h.edges(), Counts: append([]int64(nil), h.counts...), Under: h.under, Over: h.over, Log: h.log}
}

// eventBucket accumulates the samples whose event time falls in one bucket.
type eventBucket struct {
	n, successes int64
	rewardSum    float64
	baselineN    int64
	baselineSum  float64
}

func (b *eventBucket) merge(o *eventBucket) {
	b.n += o.n
	b.successes += o.successes
	b.rewardSum += o.rewardSum
	b.baselineN += o.baselineN
	b.baselineSum += o.baselineSum
}

// eventSeries is a time series over event time with a fixed number of
// buckets. It starts at minWidth per bucket and doubles the width (merging
// neighbours) whenever a sample falls outside the span it covers, so it always
// shows the whole run at the finest width that fits.
type eventSeries struct {
	width   int64 // ms per bucket
	origin  int64 // ms, a multiple of width
	buckets []eventBucket
	used    bool
}

const (
	seriesBuckets = 240
	seriesMinMs   = 100
	seriesMaxMs   = int64(1) << 50
)

func newEventSeries() *eventSeries {
	return &eventSeries{width: seriesMinMs, buckets: make([]eventBucket, seriesBuckets)}
}

func floorTo(t, w int64) int64 {
	q := t / w
	if t%w != 0 && t < 0 {
		q--
	}
	return q * w
}

func (s *eventSeries) bucket(t int64) *eventBucket {
	if !s.used {
		s.used = true
		s.origin = floorTo(t, s.width)
	}
	span := int64(len(s.buckets))
	for {
		if t >= s.origin && (t-s.origin)/s.width < span {
			return &s.buckets[(t-s.origin)/s.width]
		}
		s.regrid(t)
	}
}

// regrid widens (and moves) the grid so that it covers every non-empty
// bucket and t.
func (s *eventSeries) regrid(t int64) {
	lo, hi := t, t+1
	for i := range s.buckets {
		if s.buckets[i].n > 0 {
			start := s.origin + int64(i)*s.width
			lo = min(lo, start)
			hi = max(hi, start+s.width)
		}
	}
	w := s.width
	span := int64(len(s.buckets))
	var origin int64
	for {
		origin = floorTo(lo, w)
		if hi-origin <= span*w || w >= seriesMaxMs {
			break
		}
		w *= 2
	}
	old := s.buckets
	oldOrigin, oldWidth := s.origin, s.width
	s.buckets = make([]eventBucket, len(old))
	s.origin, s.width = origin, w
	for i := range old {
		if old[i].n == 0 {
			continue
		}
		start := oldOrigin + int64(i)*oldWidth
		j := (start - origin) / w
		if j >= 0 && j < span {
			s.buckets[j].merge(&old[i])
		}
	}
	if t < origin || (t-origin)/w >= span { // beyond seriesMaxMs: restart at t
		s.buckets = make([]eventBucket, len(old))
		s.origin = floorTo(t, w)
	}
}

// SeriesView is an event-time series as served to the page: one entry per
// non-empty bucket.
type SeriesView struct {
	WidthMs      int64      `json:"width_ms"`
	T            []float64  `json:"t"` // bucket start, Unix seconds
	Samples      []int64    `json:"samples"`
	RewardMean   []float64  `json:"reward_mean"`
	SuccessRate  []float64  `json:"success_rate"`
	BaselineMean []*float64 `json:"baseline_mean"` // null where no AttnSR sample fell
}

func (s *eventSeries) view() SeriesView {
	v := SeriesView{WidthMs: s.width, T: []float64{}, Samples: []int64{}, RewardMean: []float64{}, SuccessRate: []float64{}, BaselineMean: []*float64{}}
	for i := range s.buckets {
		b := &s.buckets[i]
		if b.n == 0 {
			continue
		}
		v.T = append(v.T, float64(s.origin+int64(i)*s.width)/1000)
		v.Samples = append(v.Samples, b.n)
		v.RewardMean = append(v.RewardMean, b.rewardSum/float64(b.n))
		v.SuccessRate = append(v.SuccessRate, float64(b.successes)/float64(b.n))
		if b.baselineN > 0 {
			m := b.baselineSum / float64(b.baselineN)
			v.BaselineMean = append(v.BaselineMean, &m)
		} else {
			v.BaselineMean = append(v.BaselineMean, nil)
		}
	}
	return v
}

// rateRing counts arrivals per wall-clock second over the last len(counts)
// seconds.
type rateRing struct {
	counts []int64
	head   int64 // the Unix second of the newest slot; 0 before the first add
}

func newRateRing(seconds int) *rateRing { return &rateRing{counts: make([]int64, seconds)} }

func (r *rateRing) advance(sec int64) {
	n := int64(len(r.counts))
	if r.head == 0 || sec-r.head >= n {
		clear(r.counts)
		r.head = sec
		return
	}
	for r.head < sec {
		r.head++
		r.counts[r.head%n] = 0
	}
}

func (r *rateRing) add(sec int64) {
	if sec < r.head-int64(len(r.counts))+1 {
		return
	}
	if sec > r.head {
		r.advance(sec)
	}
	r.counts[sec%int64(len(r.counts))]++
}

// RateView is samples per second over the last seconds of wall time.
type RateView struct {
	T      []float64 `json:"t"` // Unix seconds
	Counts []int64   `json:"counts"`
}

// view returns the last len(counts) seconds ending at now (complete seconds
// only: the current one is still filling).
func (r *rateRing) view(now int64) RateView {
	if r.head != 0 && now > r.head {
		r.advance(now)
	}
	n := int64(len(r.counts))
	v := RateView{T: make([]float64, 0, n), Counts: make([]int64, 0, n)}
	if r.head == 0 {
		return v
	}
	for s := r.head - n + 1; s < r.head; s++ {
		v.T = append(v.T, float64(s))
		v.Counts = append(v.Counts, r.counts[((s%n)+n)%n])
	}
	return v
}
