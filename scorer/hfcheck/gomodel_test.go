package hfcheck_test

import (
	"context"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// TestGoScorerMatchesTransformers loads every model folder with the Go
// scorer (cpumodel.LoadWith, what creditflow score and attention run; the
// in-process scorer of creditflow scorer on top) and compares its row
// statistics and step graphs with transformers': the float32 folder against
// transformers in float32, the bfloat16 folder (read into float32 as the Go
// scorer computes) against transformers on the same weights in float32.
func TestGoScorerMatchesTransformers(t *testing.T) {
	f := getFixture(t)
	t.Logf("transformers %s, torch %s; models built and referenced in %v", f.tfVer, f.torchV, f.elapsed.Round(1e6))
	for _, c := range checkpoints {
		t.Run(checkpointName(c.base, c.variant), func(t *testing.T) {
			m := f.model(t, checkpointName(c.base, c.variant))
			t.Logf("next-token entropy %.2f nats, log V %.2f", m.Entropy, m.LogVocab)
			if m.Entropy > 0.5*m.LogVocab {
				t.Errorf("next-token entropy %.2f is not well below log V = %.2f: the weights leave the distributions near uniform", m.Entropy, m.LogVocab)
			}
			for _, bf16 := range []bool{false, true} {
				label, ref := "float32", m.ref["float32"]
				if bf16 {
					label, ref = "bfloat16 weights", m.ref["bf16-weights"]
				}
				gm, err := cpumodel.LoadWith(m.modelDir(bf16), cpumodel.WithMaxContext(maxContext))
				if err != nil {
					t.Fatal(err)
				}
				if info := gm.Info(); info.MaxContext != maxContext || info.Layers != m.layers || info.VocabSize != m.vocab {
					t.Fatalf("info %+v", info)
				}
				cases := m.cases
				if bf16 {
					cases = logprobCases(cases)
				}
				// What creditflow score runs: ScoreRowsStatistic on full rows.
				got := make([][]float64, len(cases))
				for i, rc := range cases {
					if got[i], _, err = gm.ScoreRowsStatistic(rc.rows, rc.stat); err != nil {
						t.Fatalf("%s: %v", rc.name, err)
					}
				}
				checkScores(t, label+" (model)", scoreDiffs(t, cases, got, ref.Scores), tolScore)
				if bf16 {
					d := scoreDiffs(t, cases, got, m.ref["bfloat16"].Scores)
					t.Logf("bfloat16 weights, logprob against transformers in bfloat16: %v", d["logprob"])
				} else {
					// The in-process scorer (creditflow scorer) on the compact
					// sets the score stage sends.
					checkLocal(t, gm, cases, ref)
				}
				for j, job := range m.jobs {
					g, err := gm.StepGraphs(job.Tokens, job.Steps, job.Layers)
					if err != nil {
						t.Fatal(err)
					}
					checkGraphs(t, label, graphDiff(t, g, ref, j), tolGraph)
					if bf16 {
						t.Logf("bfloat16 weights, step graphs against transformers in bfloat16: %v", graphDiff(t, g, m.ref["bfloat16"], j))
					}
				}
			}
		})
	}
}

// checkLocal scores the logprob sets as the score stage sends them (compact,
// prefix-shared) on the in-process scorer of creditflow scorer.
func checkLocal(t *testing.T, gm *cpumodel.Model, cases []rowCase, ref refResult) {
	t.Helper()
	var sets []scorer.RowSet
	var want []float64
	k := 0
	for _, rc := range cases {
		if rc.stat == "logprob" {
			sets = append(sets, rc.set)
			want = append(want, ref.Scores[k:k+len(rc.rows)]...)
		}
		k += len(rc.rows)
	}
	res, _, err := local.New(gm).ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]float64, len(res))
	for i := range res {
		got[i] = res[i].Scores
	}
	checkScores(t, "float32 (scorer)", scoreDiffs(t, logprobCases(cases), got, want), tolScore)
}

func logprobCases(cs []rowCase) []rowCase {
	var out []rowCase
	for _, c := range cs {
		if c.stat == "logprob" {
			out = append(out, c)
		}
	}
	return out
}
