package local

import (
	"context"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/protocol"
)

func TestLocalMatchesModel(t *testing.T) {
	sets := scorertest.MakeSets(1, 12, 4)
	want := scorertest.ExpectedScores(t, sets)
	l := New(scorertest.Tiny(), WithPolicyVersion(7))
	got, usage, err := l.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "Local batch vs model per set", got, want)
	if usage.TokensForwarded >= usage.TokensRowByRow {
		t.Errorf("prefix sharing: forwarded %d tokens, row by row %d; want fewer forwarded", usage.TokensForwarded, usage.TokensRowByRow)
	}
	var rowByRow int64
	for _, s := range sets {
		rowByRow += int64(s.TokenCount())
	}
	if usage.TokensRowByRow != rowByRow {
		t.Errorf("row-by-row tokens %d, want %d", usage.TokensRowByRow, rowByRow)
	}
	info, _ := l.Info(context.Background())
	mi := scorertest.Tiny().Info()
	if info.Protocol != protocol.Version || info.PolicyVersion != 7 || info.Name != mi.Name || info.Layers != mi.Layers || info.VocabSize != mi.VocabSize {
		t.Errorf("Info = %+v, model %+v", info, mi)
	}
	jobs := scorertest.MakeJobs(2, 5)
	g, err := scorertest.Graphs(l.Attention(context.Background(), jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualGraphs(t, "Local attention vs model", g, scorertest.ExpectedGraphs(t, jobs))
	lower, err := l.Attention(context.Background(), jobs, scorer.AttentionOptions{Lower: true})
	if err != nil {
		t.Fatal(err)
	}
	if lower.PolicyVersion != 7 || lower.Graphs != nil || len(lower.Lower) != len(jobs) {
		t.Fatalf("lower answer: version %d, %d K×K and %d lower jobs; want 7, 0 and %d", lower.PolicyVersion, len(lower.Graphs), len(lower.Lower), len(jobs))
	}
	cut := make([][]scorer.LowerGraph, len(g))
	for i := range g {
		cut[i] = scorer.CutGraphs(g[i])
	}
	scorertest.EqualLowerGraphs(t, "Local lower attention vs the cut of its K×K graphs", lower.Lower, cut)
}

func TestLocalRejectsInvalidInput(t *testing.T) {
	l := New(scorertest.Tiny())
	good := scorertest.MakeSets(3, 3, 3)
	cases := map[string]func(s *scorer.RowSet){
		"token out of vocabulary": func(s *scorer.RowSet) { s.Rows[0].Context[2] = cpumodel.TinyVocab },
		"negative token":          func(s *scorer.RowSet) { s.Rows[0].Target[0] = -1 },
		"span past target":        func(s *scorer.RowSet) { s.Rows[0].Span[1] = len(s.Rows[0].Target) + 1 },
		"empty span":              func(s *scorer.RowSet) { s.Rows[0].Span[1] = s.Rows[0].Span[0] },
		"no rows":                 func(s *scorer.RowSet) { s.Rows = nil },
	}
	for name, mutate := range cases {
		sets := scorertest.MakeSets(3, 3, 3)
		mutate(&sets[1])
		_, _, err := l.ScoreRows(context.Background(), sets)
		rej, ok := scorertest.AsRejected(err)
		if !ok {
			t.Errorf("%s: error %v, want *RejectedError", name, err)
			continue
		}
		if rej.Item != 1 || rej.ID != "traj-1" || rej.Code != scorer.CodeBadRequest {
			t.Errorf("%s: rejection %+v, want item 1 id traj-1", name, rej)
		}
	}
	if _, _, err := l.ScoreRows(context.Background(), good); err != nil {
		t.Fatalf("valid sets: %v", err)
	}
	jobs := scorertest.MakeJobs(4, 2)
	jobs[1].Layers = []int{5}
	if _, err := l.Attention(context.Background(), jobs, scorer.AttentionOptions{}); err == nil {
		t.Fatal("layer 5 of a 2-layer model accepted")
	} else if rej, ok := scorertest.AsRejected(err); !ok || rej.Item != 1 {
		t.Fatalf("bad layer: %v, want rejection of item 1", err)
	}
	jobs = scorertest.MakeJobs(4, 2)
	jobs[0].Steps[1].Action[0] = 0 // overlaps step 0
	if _, err := l.Attention(context.Background(), jobs, scorer.AttentionOptions{}); err == nil {
		t.Fatal("overlapping steps accepted")
	}
}
