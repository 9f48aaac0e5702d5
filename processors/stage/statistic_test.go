package stage_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/vocab"
)

// offlineGains is Δ of every eligible turn of t under stat, computed
// offline on the model itself (cpumodel.ScoreRowsStatistic, what `creditflow
// score --statistic` runs) from the logprob plan's rows: entropy
// H(without) − H(with), kl KL(with ‖ without) (docs/method.md §2.4).
func offlineGains(t *testing.T, m *cpumodel.Model, tr *schemas.Trajectory, stat vocab.Statistic, cc credit.Config) map[int]float64 {
	t.Helper()
	rows, with, without, err := scoring.LAPORows(tr, stage.Backward, cc, m.Info().PlaceholderIDs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]float64{}
	if len(rows) == 0 {
		return out
	}
	switch stat {
	case credit.StatEntropy:
		h, _, err := m.ScoreRowsStatistic(rows, scorer.StatEntropy)
		if err != nil {
			t.Fatal(err)
		}
		for i := range with {
			if with[i] >= 0 {
				out[i] = h[without[i]] - h[with[i]]
			}
		}
	case credit.StatKL:
		for i := range with {
			if with[i] < 0 {
				continue
			}
			r := rows[with[i]]
			r.ReferenceContext = rows[without[i]].Context
			kl, _, err := m.ScoreRowsStatistic([]scorer.Row{r}, scorer.StatKL)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = kl[0]
		}
	}
	return out
}

// TestPipelineLAPOStatistics runs both stages on the embedded broker with
// the entropy and the kl statistic: the scored records are labelled
// backward:<statistic>, every sample's Δ equals the offline computation on
// the model to 1e-12 (and is not the logprob Δ), and every sample equals
// `creditflow compute` on the scored records.
func TestPipelineLAPOStatistics(t *testing.T) {
	m := cpumodel.Tiny()
	for _, stat := range []vocab.Statistic{credit.StatEntropy, credit.StatKL} {
		t.Run(string(stat), func(t *testing.T) {
			e := newEnv(t, 1, func(c *stage.Config) {
				c.LAPOStatistic = stat
				c.CommitInterval = 100 * time.Millisecond
			})
			gen := synth.Default()
			gen.GroupSize = 3
			trajs := append(gen.Group(0), gen.Group(1)...)
			var msgs []producers.Message
			for i := range trajs {
				v, err := schemas.Trajectories().Encode(&trajs[i])
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, producers.Message{Topic: e.cfg.Topics.Trajectories, Key: []byte(trajs[i].PromptID), Value: v})
			}
			if err := e.prod.Produce(e.ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			e.runStages(t, local.New(m))
			got := samplesByID(t, e.cfg.Brokers, e.cfg.Topics.Samples, len(trajs))
			if len(got) != len(trajs) {
				t.Fatalf("%d samples, want %d", len(got), len(trajs))
			}
			for _, recs := range readTopic(t, e.cfg.Brokers, e.cfg.Topics.Scored) {
				for _, r := range recs {
					s, err := schemas.ScoredRecords().Decode(r.Value)
					if err != nil {
						t.Fatal(err)
					}
					if s.Direction != "backward:"+string(stat) {
						t.Fatalf("scored record labelled %q, want backward:%s", s.Direction, stat)
					}
				}
			}
			checked := 0
			for i := range trajs {
				tr := &trajs[i]
				s, err := schemas.Samples().Decode(got[tr.TrajectoryID])
				if err != nil {
					t.Fatal(err)
				}
				want := offlineGains(t, m, tr, stat, e.cfg.Credit)
				lp, err := scoring.Gains(context.Background(), local.New(m), tr, stage.Backward, e.cfg.Credit, m.Info().PlaceholderIDs)
				if err != nil {
					t.Fatal(err)
				}
				for k, d := range s.Turns {
					w, ok := want[k]
					if !ok {
						if d.Delta != nil && d.Eligible {
							t.Fatalf("%s turn %d: Δ %v where nothing was scored", tr.TrajectoryID, k, *d.Delta)
						}
						continue
					}
					if d.Delta == nil || math.Abs(*d.Delta-w) > 1e-12*math.Max(1, math.Abs(w)) {
						t.Fatalf("%s turn %d: stream Δ %v, offline %s Δ %v", tr.TrajectoryID, k, d.Delta, stat, w)
					}
					if lp[k].Delta != nil && *lp[k].Delta == w {
						t.Fatalf("%s turn %d: the %s Δ equals the logprob Δ %v", tr.TrajectoryID, k, stat, w)
					}
					if stat == credit.StatKL && !(w >= 0) {
						t.Fatalf("%s turn %d: KL %v is negative", tr.TrajectoryID, k, w)
					}
					checked++
				}
			}
			if checked < len(trajs) {
				t.Fatalf("only %d eligible turns checked", checked)
			}
			if n := compareWithCompute(t, e.cfg.Brokers, e.cfg.Topics, e.cfg.Credit); n != len(trajs) {
				t.Fatalf("%d samples compared with compute, want %d", n, len(trajs))
			}
		})
	}
}

// withoutStatistics hides scorer.FeatureStatistics, as a scorer from before it.
type withoutStatistics struct{ scorer.Scorer }

func (w withoutStatistics) Info(ctx context.Context) (scorer.ModelInfo, error) {
	info, err := w.Scorer.Info(ctx)
	info.Features = nil
	return info, err
}

// TestScoreStageNeedsStatisticsFeature: an entropy or kl score stage does
// not start on a scorer that does not compute them; logprob still does.
func TestScoreStageNeedsStatisticsFeature(t *testing.T) {
	cfg := stage.DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:1"}
	old := withoutStatistics{local.New(cpumodel.Tiny())}
	for _, stat := range []vocab.Statistic{credit.StatEntropy, credit.StatKL} {
		cfg.LAPOStatistic = stat
		if _, err := stage.NewScoreStage(context.Background(), cfg, old, nil); !errors.Is(err, stage.ErrScorerWithoutStatistics) {
			t.Fatalf("%s on a scorer without statistics: %v, want ErrScorerWithoutStatistics", stat, err)
		}
		if _, err := stage.NewScoreStage(context.Background(), cfg, local.New(cpumodel.Tiny()), nil); err != nil {
			t.Fatalf("%s on the in-process scorer: %v", stat, err)
		}
	}
	cfg.LAPOStatistic = credit.StatLogProb
	if _, err := stage.NewScoreStage(context.Background(), cfg, old, nil); err != nil {
		t.Fatalf("logprob on a scorer without statistics: %v", err)
	}
	cfg.LAPOStatistic = "variance"
	if _, err := stage.NewScoreStage(context.Background(), cfg, old, nil); err == nil {
		t.Fatal("an unknown statistic was accepted")
	}
}
