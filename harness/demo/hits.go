package demo

import (
	"context"
	"sync"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/vocab"
)

// hits measures where credit lands, against the worlds' ground truth
// (harness/synth): LAPO's largest Δ on the informative turn, AttnSR's
// largest intermediate p_k on the key step. The trainer feeds it every sample
// it consumes; the truth of each trajectory is registered when it is
// produced. It is not safe for concurrent use (the trainer holds its lock).
type hits struct {
	truth map[string]truthOf

	lapoN, lapoHit int
	lapoChance     float64  // Σ 1/(eligible turns): the expected hits of a uniform pick
	lapoSet        []string // ids of the trajectories measured, for the offline passes

	attnN, attnHit int
	attnChance     float64
}

type truthOf struct {
	t     schemas.Trajectory
	truth synth.Truth
}

func newHits() *hits { return &hits{truth: map[string]truthOf{}} }

func (h *hits) add(t schemas.Trajectory, tr synth.Truth) { h.truth[t.TrajectoryID] = truthOf{t, tr} }

// largest returns the index of the largest of xs (nil entries skipped; the
// first on ties) and how many entries are set.
func largest(xs []*float64) (best, n int) {
	best = -1
	for i, x := range xs {
		if x == nil {
			continue
		}
		n++
		if best < 0 || *x > *xs[best] {
			best = i
		}
	}
	return best, n
}

// observe counts one consumed sample.
func (h *hits) observe(s *schemas.Sample) {
	tr, ok := h.truth[s.TrajectoryID]
	if !ok {
		return
	}
	deltas := make([]*float64, len(s.Turns))
	ps := make([]*float64, len(s.Turns))
	for i, d := range s.Turns {
		if d.Eligible && d.Delta != nil {
			deltas[i] = d.Delta
		}
		ps[i] = d.P
	}
	if tr.truth.Informative >= 0 {
		if best, n := largest(deltas); n >= 2 {
			h.lapoN++
			h.lapoChance += 1 / float64(n)
			h.lapoSet = append(h.lapoSet, s.TrajectoryID)
			if best == tr.truth.Informative {
				h.lapoHit++
			}
		}
	}
	if tr.truth.Key >= 0 {
		if best, n := largest(ps); n >= 2 {
			h.attnN++
			h.attnChance += 1 / float64(n)
			if best == tr.truth.Key {
				h.attnHit++
			}
		}
	}
}

// offlineLAPO scores trajectories on m in-process, as the score stage would
// in direction, and returns the share whose largest Δ is on the informative
// turn. The demo uses it for the rates of the other direction and of the
// random-weight model on exactly the trajectories the run measured.
func offlineLAPO(ctx context.Context, m *cpumodel.Model, direction vocab.Direction, stat vocab.Statistic, cc credit.Config, set []truthOf) (float64, error) {
	sc := local.New(m)
	hit, n := 0, 0
	for _, tr := range set {
		if err := ctx.Err(); err != nil { // between trajectories: Ctrl-C ends the pass at once
			return 0, err
		}
		ts, err := scoring.GainsStatistic(ctx, sc, &tr.t, direction, stat, cc, m.Info().PlaceholderIDs)
		if err != nil {
			return 0, err
		}
		deltas := make([]*float64, len(ts))
		for i := range ts {
			deltas[i] = ts[i].Delta
		}
		best, k := largest(deltas)
		if k < 2 {
			continue
		}
		n++
		if best == tr.truth.Informative {
			hit++
		}
	}
	return share(hit, n), nil
}

// finish fills the summary's hit rates; for LAPO it runs the offline passes
// (forward direction with the run's model unless the run was forward, and
// the run's direction with the random-weight model) concurrently.
func (h *hits) finish(ctx context.Context, s *Summary, o Options, m *cpumodel.Model) error {
	if h.attnN > 0 {
		s.AttnSRKeyHitRate = ptrRound(share(h.attnHit, h.attnN))
		s.AttnSRKeyChance = ptrRound(h.attnChance / float64(h.attnN))
		s.AttnSRKeyMeasured = h.attnN
	}
	if h.lapoN == 0 {
		return nil
	}
	stat := o.LAPOStatistic
	if stat == "" {
		stat = credit.StatLogProb
	}
	s.LAPOStatistic = stat
	s.LAPOHitRate = ptrRound(share(h.lapoHit, h.lapoN))
	s.LAPOHitChance = ptrRound(h.lapoChance / float64(h.lapoN))
	s.LAPOHitMeasured = h.lapoN
	set := make([]truthOf, len(h.lapoSet))
	for i, id := range h.lapoSet {
		set[i] = h.truth[id]
	}
	cc := o.Credit
	cc.Method = credit.MethodLAPO
	var wg sync.WaitGroup
	var fwd, rnd float64
	var errF, errR error
	if o.Direction == stage.Forward {
		fwd = *s.LAPOHitRate
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); fwd, errF = offlineLAPO(ctx, m, stage.Forward, stat, cc, set) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rnd, errR = offlineLAPO(ctx, cpumodel.TinyRandom(), o.Direction, stat, cc, set)
	}()
	wg.Wait()
	if errF != nil {
		return errF
	}
	if errR != nil {
		return errR
	}
	s.LAPOHitForward, s.LAPOHitRandom = ptrRound(fwd), ptrRound(rnd)
	return nil
}

func ptrRound(x float64) *float64 { r := round(x, 4); return &r }
