package scoring

import (
	"context"
	"testing"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/vocab"
)

// creditHits scores the first n search-QA trajectories (demo seed) that have
// an informative turn and at least two eligible turns on m, in direction,
// and returns how many have their largest Δ on the informative turn.
func creditHits(t *testing.T, m *cpumodel.Model, direction vocab.Direction, n int) (hits int, chance float64) {
	t.Helper()
	gen := synth.Default()
	cc := credit.DefaultConfig()
	sc := local.New(m)
	seen := 0
	for g := 0; seen < n; g++ {
		for i := 0; i < gen.GroupSize && seen < n; i++ {
			tr, truth := gen.Generate(g, i)
			if truth.Informative < 0 {
				continue
			}
			ts, err := Gains(context.Background(), sc, &tr, direction, cc, m.Info().PlaceholderIDs)
			if err != nil {
				t.Fatal(err)
			}
			best, k := -1, 0
			for j, s := range ts {
				if s.Delta == nil {
					continue
				}
				k++
				if best < 0 || *s.Delta > *ts[best].Delta {
					best = j
				}
			}
			if k < 2 {
				continue
			}
			seen++
			chance += 1 / float64(k)
			if best == truth.Informative {
				hits++
			}
		}
	}
	return hits, chance
}

// TestCreditLandsOnInformativeTurn: with the trained built-in model, the
// largest LAPO gain is on the search turn whose observation holds the gold
// answer in at least 16 of 20 trajectories (a pipeline that left out the
// wrong turn, or paired the wrong rows, lands near chance, about 8 of 20).
func TestCreditLandsOnInformativeTurn(t *testing.T) {
	hits, chance := creditHits(t, cpumodel.Tiny(), Backward, 20)
	t.Logf("trained model, backward: %d of 20 on the informative turn (chance %.1f)", hits, chance)
	if hits < 16 {
		t.Fatalf("largest Δ on the informative turn in %d of 20 trajectories, want ≥ 16 (chance %.1f)", hits, chance)
	}
}

// TestCreditRandomModelNearChance: the random-weight model knows nothing, so
// its largest Δ lands on the informative turn about as often as chance.
func TestCreditRandomModelNearChance(t *testing.T) {
	hits, chance := creditHits(t, cpumodel.TinyRandom(), Backward, 20)
	t.Logf("random model, backward: %d of 20 on the informative turn (chance %.1f)", hits, chance)
	if hits >= 16 {
		t.Fatalf("the random-weight model finds the informative turn in %d of 20 (chance %.1f): the measurement cannot tell models apart", hits, chance)
	}
}

// keyStepHits computes AttnSR allocations for the first n ALFWorld
// trajectories (demo seed) on m, as the pipeline does (the score stage's
// attention job, the default layers and the credit math), and returns how
// many have their largest intermediate p_k on the key step.
func keyStepHits(t *testing.T, m *cpumodel.Model, n int) (hits int, chance float64) {
	t.Helper()
	gen := synth.Default()
	gen.Shape = synth.ALFWorld
	cc := credit.DefaultConfig()
	sc := local.New(m)
	layers := credit.AttnSRLayers(m.Info().Layers)
	for k := 0; k < n; k++ {
		tr, truth := gen.Generate(k/gen.GroupSize, k%gen.GroupSize)
		res, err := sc.Attention(context.Background(), []scorer.AttentionJob{AttentionJob(&tr, layers)}, scorer.AttentionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var lg []credit.LayerGraph
		for _, g := range res.Graphs[0] {
			lg = append(lg, credit.LayerGraph{Layer: g.Layer, AA: g.AA, AO: g.AO})
		}
		a := credit.Allocate(lg, len(tr.Turns), cc)
		best := 0
		for j := range a.P {
			if a.P[j] > a.P[best] {
				best = j
			}
		}
		chance += 1 / float64(len(a.P))
		if best == truth.Key {
			hits++
		}
	}
	return hits, chance
}

// TestAttentionFindsKeyStep: with the trained built-in model, AttnSR's
// largest step share falls on the step that revealed the code the final
// action needs far more often than chance (about 2 of 20).
func TestAttentionFindsKeyStep(t *testing.T) {
	hits, chance := keyStepHits(t, cpumodel.Tiny(), 20)
	t.Logf("trained model: largest p_k on the key step in %d of 20 (chance %.1f)", hits, chance)
	if hits < 10 {
		t.Fatalf("largest p_k on the key step in %d of 20 trajectories, want ≥ 10 (chance %.1f)", hits, chance)
	}
}
