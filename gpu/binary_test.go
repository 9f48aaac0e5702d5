package gpu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/creditflow/creditflow/gpu"
	"github.com/creditflow/creditflow/gpu/client"
	"github.com/creditflow/creditflow/gpu/internal/scorertest"
	"github.com/creditflow/creditflow/gpu/local"
	"github.com/creditflow/creditflow/gpu/protocol"
	"github.com/creditflow/creditflow/gpu/server"
)

// forms records the Content-Type of score requests and the Accept of
// attention requests a server receives, and can hide FeatureBinary.
type forms struct {
	h          http.Handler
	hideBinary bool
	binary     atomic.Int64 // binary score requests or binary-accepting attention requests
	json       atomic.Int64
	binAnswers atomic.Int64 // attention answers sent as binary graphs
}

func (f *forms) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case protocol.PathInfo:
		if f.hideBinary {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, r)
			var info gpu.ModelInfo
			_ = json.Unmarshal(rec.Body.Bytes(), &info)
			info.Features = []string{protocol.FeatureRowPieces}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(info)
			return
		}
	case protocol.PathScore:
		if protocol.IsMediaType(r.Header.Get("Content-Type"), protocol.MediaTypeRows) {
			f.binary.Add(1)
		} else {
			f.json.Add(1)
		}
	case protocol.PathAttention:
		if protocol.Accepts(r.Header.Get("Accept"), protocol.MediaTypeGraphs) {
			f.binary.Add(1)
		} else {
			f.json.Add(1)
		}
	}
	f.h.ServeHTTP(w, r)
	if r.URL.Path == protocol.PathAttention && protocol.IsMediaType(w.Header().Get("Content-Type"), protocol.MediaTypeGraphs) {
		f.binAnswers.Add(1)
	}
}

// The client speaks binary to servers that advertise it and JSON to the
// others, and the answers are the same.
func TestClientUsesBinaryBodiesPerEndpoint(t *testing.T) {
	bin := &forms{h: server.New(local.New(scorertest.Tiny())).Handler()}
	binURL, _ := scorertest.ServeHandler(t, bin)
	js := &forms{h: server.New(local.New(scorertest.Tiny())).Handler(), hideBinary: true}
	jsURL, _ := scorertest.ServeHandler(t, js)
	full := scorertest.MakeSets(31, 6, 2)
	sets := make([]gpu.RowSet, len(full))
	for i, s := range full {
		sets[i] = scorertest.CompactOf(s)
	}
	jobs := scorertest.MakeJobs(32, 3)
	wantScores, wantGraphs := scorertest.ExpectedScores(t, full), scorertest.ExpectedGraphs(t, jobs)
	for _, url := range []string{binURL, jsURL} {
		c := newClient(t, []string{url}, client.WithMaxWait(0))
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := c.ScoreRows(context.Background(), sets)
		if err != nil {
			t.Fatal(err)
		}
		scorertest.EqualScores(t, url, got, wantScores)
		graphs, err := c.Attention(context.Background(), jobs)
		if err != nil {
			t.Fatal(err)
		}
		scorertest.EqualGraphs(t, url, graphs, wantGraphs)
	}
	if bin.binary.Load() < 2 || bin.json.Load() != 0 {
		t.Errorf("server with %q: %d binary, %d JSON requests; want only binary", protocol.FeatureBinary, bin.binary.Load(), bin.json.Load())
	}
	if bin.binAnswers.Load() < 1 || js.binAnswers.Load() != 0 {
		t.Errorf("binary attention answers: %d from the server with %q, %d from the one without; want some and none",
			bin.binAnswers.Load(), protocol.FeatureBinary, js.binAnswers.Load())
	}
	if js.binary.Load() != 0 || js.json.Load() < 2 {
		t.Errorf("server without %q: %d binary, %d JSON requests; want only JSON", protocol.FeatureBinary, js.binary.Load(), js.json.Load())
	}
}
