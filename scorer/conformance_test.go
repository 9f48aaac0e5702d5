package scorer_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// TestConformance checks an external scorer pod serving the tiny model
// (cpumodel.WriteTiny) against the Go reference: same scores and step graphs
// within a tolerance, and the error contract. It runs only when
// CREDITFLOW_SCORER_URL names the pod (docs/scorer-protocol.md).
func TestConformance(t *testing.T) {
	url := os.Getenv("CREDITFLOW_SCORER_URL")
	if url == "" {
		t.Skip("set CREDITFLOW_SCORER_URL to check a running scorer pod")
	}
	token := os.Getenv("CREDITFLOW_SCORER_TOKEN")
	tol := 1e-4
	if s := os.Getenv("CREDITFLOW_SCORER_TOL"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("CREDITFLOW_SCORER_TOL=%q: %v", s, err)
		}
		tol = v
	}
	ctx := context.Background()
	c := newClient(t, []string{url}, client.WithBearerToken(token))
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := local.New(scorertest.Tiny()).Info(ctx)
	if info.Layers != ref.Layers || info.VocabSize != ref.VocabSize {
		t.Fatalf("pod serves %+v; load the tiny model (cpumodel.WriteTiny) to compare with the reference %+v", info, ref)
	}

	sets := scorertest.MakeSets(31, 25, 5)
	for i := range sets { // some rows at a rollout temperature other than 1
		for j := range sets[i].Rows {
			sets[i].Rows[j].Temperature = []float64{0, 0.7, 1.3}[(i+j)%3]
		}
	}
	want := scorertest.ExpectedScores(t, sets)
	got, _, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		for j := range want[i].Scores {
			if d := math.Abs(got[i].Scores[j] - want[i].Scores[j]); !(d <= tol) {
				t.Fatalf("set %d row %d: pod %v, reference %v (|diff| %g > %g)", i, j, got[i].Scores[j], want[i].Scores[j], d, tol)
			}
		}
	}
	if slices.Contains(info.Features, protocol.FeatureRowPieces) {
		// Compact rows must score exactly as the same rows with full contexts.
		compact := make([]scorer.RowSet, len(sets))
		for i, s := range sets {
			compact[i] = scorertest.CompactOf(s)
		}
		gotC, _, err := c.ScoreRows(ctx, compact)
		if err != nil {
			t.Fatalf("compact rows: %v", err)
		}
		scorertest.EqualScores(t, "compact vs full rows on the pod", gotC, got)
	} else {
		t.Logf("the pod does not advertise %s: compact rows not checked", protocol.FeatureRowPieces)
	}
	jobs := scorertest.MakeJobs(32, 10)
	wantG := scorertest.ExpectedGraphs(t, jobs)
	gotG, err := scorertest.Graphs(c.Attention(ctx, jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range wantG {
		for l := range wantG[i] {
			w, g := wantG[i][l], gotG[i][l]
			if g.Layer != w.Layer {
				t.Fatalf("job %d graph %d: layer %d, want %d", i, l, g.Layer, w.Layer)
			}
			for r := range w.AA {
				for k := range w.AA[r] {
					if d := math.Abs(g.AA[r][k] - w.AA[r][k]); !(d <= tol) {
						t.Fatalf("job %d layer %d aa[%d][%d]: pod %v, reference %v", i, w.Layer, r, k, g.AA[r][k], w.AA[r][k])
					}
					if d := math.Abs(g.AO[r][k] - w.AO[r][k]); !(d <= tol) {
						t.Fatalf("job %d layer %d ao[%d][%d]: pod %v, reference %v", i, w.Layer, r, k, g.AO[r][k], w.AO[r][k])
					}
				}
			}
		}
	}

	// Error contract.
	bad := scorertest.MakeSets(33, 3, 3)
	bad[2].Rows[0].Target[0] = cpumodel.TinyVocab
	_, _, err = c.ScoreRows(ctx, bad)
	if rej, ok := scorertest.AsRejected(err); !ok || rej.Item != 2 {
		t.Errorf("out-of-vocabulary token in set 2: %v, want a rejection of item 2", err)
	}
	hdr := map[string]string{protocol.Header: "creditflow.scorer/v0"}
	if token != "" {
		hdr["Authorization"] = "Bearer " + token
	}
	body, _ := json.Marshal(protocol.SetsToWire(sets[:1]))
	if st, eb := scorertest.Post(t, url+protocol.PathScore, hdr, body); st != 400 || eb.Code != scorer.CodeVersionMismatch {
		t.Errorf("old protocol header: %d %s, want 400 version_mismatch", st, eb.Code)
	}
	if token != "" {
		wrong := newClient(t, []string{url}, client.WithBearerToken(token+"x"))
		var se *scorer.StatusError
		if _, _, err := wrong.ScoreRows(ctx, sets[:1]); !errors.As(err, &se) || se.Status != 401 {
			t.Errorf("wrong token: %v, want 401", err)
		}
	}
}
