package pod_test

import (
	"context"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// scaleUsage is a score answer's usage with the pod's packing fields.
type scaleUsage struct {
	TokensForwarded int64 `json:"tokens_forwarded"`
	TokensRowByRow  int64 `json:"tokens_row_by_row"`
	Packs           int64 `json:"packs"`
	MaxPackTokens   int64 `json:"max_pack_tokens"`
}

type scaleAnswer struct {
	Results []protocol.WireRowScores `json:"results"`
	Usage   scaleUsage               `json:"usage"`
	Error   string                   `json:"error"`
}

func wireSets(sets []scorer.RowSet) protocol.ScoreRequest {
	var req protocol.ScoreRequest
	for _, s := range sets {
		ws := protocol.WireRowSet{ID: s.ID}
		for _, row := range s.Rows {
			ws.Rows = append(ws.Rows, protocol.WireRow{Context: row.Context, Target: row.Target, Span: &row.Span})
		}
		req.Sets = append(req.Sets, ws)
	}
	return req
}

// TestPodTreePackingAtScale starts the pod with --packing tree on a checkpoint it has not
// seen and sends what broke it before: 1,500 chained rows (a gold answer scored after every
// prefix of one trajectory: a radix tree 1,500 nodes deep), scored like the Go reference,
// and (with CREDITFLOW_POD_LONG=1) the backward rows of a 30-turn trajectory of 32,000
// tokens, whose tree (~490k distinct tokens) must go in packs of at most 4,096 tokens.
func TestPodTreePackingAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of CPU: 1,500 rows")
	}
	dir := filepath.Join(t.TempDir(), "unseen")
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	p := startPod(t, dir, "--packing", "tree")
	r := rand.New(rand.NewSource(11))
	tok := func(n, vocab int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r.Intn(vocab))
		}
		return out
	}

	t.Run("1500 chained rows", func(t *testing.T) {
		traj := tok(1500, 200)
		gold := tok(6, 50)
		for i := range gold {
			gold[i] += 200 // never a trajectory token: the chain is 1,500 nodes deep
		}
		set := scorer.RowSet{ID: "chain"}
		for k := 1; k <= 1500; k++ {
			set.Rows = append(set.Rows, scorer.Row{Context: traj[:k], Target: gold, Span: [2]int{0, 6}})
		}
		var ans scaleAnswer
		start := time.Now()
		if st := postJSON(t, p.url+protocol.PathScore, podToken, wireSets([]scorer.RowSet{set}), &ans); st != 200 {
			t.Fatalf("1,500 chained rows: status %d: %s", st, ans.Error)
		}
		t.Logf("1,500 chained rows: 200 in %.1f s, usage %+v", time.Since(start).Seconds(), ans.Usage)
		if ans.Usage.MaxPackTokens > 4096 || ans.Usage.Packs == 0 || ans.Usage.TokensForwarded != 1500+1500*6 {
			t.Errorf("usage %+v: want packs > 0 of at most 4,096 tokens and 10,500 tokens forwarded", ans.Usage)
		}
		ref, _, err := local.New(cpumodel.Tiny()).ScoreRows(context.Background(), []scorer.RowSet{set})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]scorer.RowScores, 1)
		for _, s := range ans.Results[0].Scores {
			got[0].Scores = append(got[0].Scores, float64(s))
		}
		compareScores(t, "1,500 chained rows", got, ref, 1e-4)
	})

	t.Run("32k-token trajectory", func(t *testing.T) {
		if os.Getenv("CREDITFLOW_POD_LONG") == "" {
			// ~490k tokens over 16k-token contexts on average: 6.4e10 attention scores on
			// the tiny model, ~20 CPU-minutes on a small machine's reference path, so not in
			// every `go test ./...`; the Python tests check the same plan's bounds.
			t.Skip("set CREDITFLOW_POD_LONG=1 to score a 32k-token, 30-turn trajectory (tens of CPU-minutes)")
		}
		const turns, total = 30, 32000
		prompt := tok(300, 256)
		per := (total - len(prompt) - 30) / turns
		ts := make([][]int32, turns)
		for i := range ts {
			ts[i] = tok(per, 256)
		}
		gold := tok(25, 256)
		span := [2]int{14, 20}
		full := append([]int32(nil), prompt...)
		for _, x := range ts {
			full = append(full, x...)
		}
		set := scorer.RowSet{ID: "long", Rows: []scorer.Row{{Context: full, Target: gold, Span: span}}}
		for k := range ts {
			ctx := append([]int32(nil), prompt...)
			for i, x := range ts {
				if i == k {
					ctx = append(ctx, cpumodel.TinyDelete)
				} else {
					ctx = append(ctx, x...)
				}
			}
			set.Rows = append(set.Rows, scorer.Row{Context: ctx, Target: gold, Span: span})
		}
		var ans scaleAnswer
		start := time.Now()
		if st := postJSON(t, p.url+protocol.PathScore, podToken, wireSets([]scorer.RowSet{set}), &ans); st != 200 {
			t.Fatalf("32k-token trajectory: status %d: %s", st, ans.Error)
		}
		t.Logf("32k-token trajectory, %d rows: 200 in %.1f s, usage %+v", len(set.Rows), time.Since(start).Seconds(), ans.Usage)
		if ans.Usage.MaxPackTokens > 4096 || ans.Usage.Packs == 0 || ans.Usage.TokensForwarded < 400000 {
			t.Errorf("usage %+v: want packs of at most 4,096 tokens over > 400k forwarded tokens", ans.Usage)
		}
		for j, s := range ans.Results[0].Scores {
			if v := float64(s); math.IsNaN(v) || v > 0 || v < -20 {
				t.Errorf("row %d: S = %v, want a mean log-probability", j, v)
			}
		}
	})
}
