package demo

import (
	"context"
	"testing"
	"time"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/vocab"
)

// TestDemoCreditHitRate runs the whole pipeline (embedded Kafka, scorer
// servers, both stages, trainer) and checks where credit lands against the
// worlds' ground truth: LAPO's largest Δ on the informative turn for most
// trajectories with the trained model, clearly above the random-weight
// model and chance; AttnSR's largest p_k on the key step above chance.
func TestDemoCreditHitRate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	o := Defaults()
	o.Groups, o.Bad, o.Timeout = 8, 0, 4*time.Minute
	s, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if s.LAPOHitRate == nil || s.LAPOHitRandom == nil || s.LAPOHitForward == nil || s.LAPOHitChance == nil {
		t.Fatalf("summary without hit rates: %+v", s)
	}
	t.Logf("LAPO: hit %.3f of %d (forward %.3f, random model %.3f, chance %.3f)",
		*s.LAPOHitRate, s.LAPOHitMeasured, *s.LAPOHitForward, *s.LAPOHitRandom, *s.LAPOHitChance)
	if s.LAPOHitMeasured < 10 {
		t.Fatalf("only %d trajectories measured", s.LAPOHitMeasured)
	}
	if *s.LAPOHitRate < 0.8 || *s.LAPOHitRate < *s.LAPOHitRandom+0.2 {
		t.Fatalf("LAPO hit rate %.3f (random model %.3f, chance %.3f): want ≥ 0.8 and well above the random model",
			*s.LAPOHitRate, *s.LAPOHitRandom, *s.LAPOHitChance)
	}

	o.Method, o.Groups = credit.MethodAttnSR, 4
	o.Credit.Method = credit.MethodAttnSR
	s, err = Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if s.AttnSRKeyHitRate == nil || s.AttnSRKeyMeasured != 20 {
		t.Fatalf("AttnSR summary without the key-step rate over 20 trajectories: %+v", s)
	}
	t.Logf("AttnSR: key step %.3f (chance %.3f)", *s.AttnSRKeyHitRate, *s.AttnSRKeyChance)
	if *s.AttnSRKeyHitRate < 2**s.AttnSRKeyChance {
		t.Fatalf("AttnSR key-step hit rate %.3f, chance %.3f", *s.AttnSRKeyHitRate, *s.AttnSRKeyChance)
	}
}

// TestDemoLAPOStatistics runs the pipeline with the LAPO authors' other
// statistics (docs/method.md §2.4): the run is labelled with its
// statistic, kl's gains are never negative (a KL divergence), and for both
// the largest Δ is on the informative turn for most trajectories.
func TestDemoLAPOStatistics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline")
	}
	for _, stat := range []vocab.Statistic{credit.StatEntropy, credit.StatKL} {
		o := Defaults()
		o.Groups, o.Bad, o.Timeout, o.LAPOStatistic = 8, 0, 4*time.Minute, stat
		s, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if s.LAPOStatistic != stat || s.LAPOHitRate == nil || s.LAPOHitMeasured < 10 {
			t.Fatalf("%s: summary %+v", stat, s)
		}
		t.Logf("%s: hit %.3f of %d (forward %.3f, random model %.3f, chance %.3f); Δ %.3f positive",
			stat, *s.LAPOHitRate, s.LAPOHitMeasured, *s.LAPOHitForward, *s.LAPOHitRandom, *s.LAPOHitChance, s.PositiveDelta)
		if *s.LAPOHitRate < 0.8 {
			t.Fatalf("%s: hit rate %.3f, want ≥ 0.8", stat, *s.LAPOHitRate)
		}
		if stat == credit.StatKL && (s.NegativeDelta != 0 || s.PositiveDelta == 0) {
			t.Fatalf("kl: Δ %.3f positive, %.3f negative; a KL divergence is never negative", s.PositiveDelta, s.NegativeDelta)
		}
	}
}
