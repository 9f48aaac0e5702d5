package scorer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
)

// forms records the Content-Type of score requests and the Accept of
// attention requests a server receives, and can hide FeatureBinary.
type forms struct {
	h            http.Handler
	hideBinary   bool
	hideLower    bool         // hide only FeatureLowerGraphs
	binary       atomic.Int64 // binary score requests or binary-accepting attention requests
	json         atomic.Int64
	binAnswers   atomic.Int64 // attention answers sent as binary graphs
	lowerAnswers atomic.Int64 // attention answers sent as lower graphs
	binaryJobs   atomic.Int64 // binary attention requests
}

func (f *forms) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case protocol.PathInfo:
		if f.hideBinary || f.hideLower {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, r)
			var info scorer.ModelInfo
			_ = json.Unmarshal(rec.Body.Bytes(), &info)
			if f.hideBinary {
				info.Features = []string{protocol.FeatureRowPieces}
			} else {
				info.Features = slices.DeleteFunc(info.Features, func(s string) bool { return s == protocol.FeatureLowerGraphs })
			}
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
		if protocol.IsMediaType(r.Header.Get("Content-Type"), protocol.MediaTypeJobs) {
			f.binaryJobs.Add(1)
		}
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
	if r.URL.Path == protocol.PathAttention && protocol.IsMediaType(w.Header().Get("Content-Type"), protocol.MediaTypeLowerGraphs) {
		f.lowerAnswers.Add(1)
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
	sets := make([]scorer.RowSet, len(full))
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
		got, _, err := c.ScoreRows(context.Background(), sets)
		if err != nil {
			t.Fatal(err)
		}
		scorertest.EqualScores(t, url, got, wantScores)
		graphs, err := scorertest.Graphs(c.Attention(context.Background(), jobs, scorer.AttentionOptions{}))
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

// Attention with AttentionOptions.Lower gives the scored record's compact graphs bit for bit as
// stepgraph.Cut makes them of the model's K×K graphs, whether the pod
// answers in lower graphs (then it does, and only then), in binary K×K
// graphs or in JSON; binary attention requests go to the servers that
// advertise them; and callers asking for K×K graphs and for lower ones at
// once each get theirs.
func TestClientAttentionLowerPerEndpoint(t *testing.T) {
	jobs := scorertest.MakeJobs(33, 7)
	full := scorertest.ExpectedGraphs(t, jobs)
	want := make([][]scorer.LowerGraph, len(full))
	sums := 0
	for i, gs := range full {
		for _, g := range gs {
			lg := stepgraph.Cut(g.Layer, g.AA, g.AO)
			if lg.Summed() {
				sums++
			}
			want[i] = append(want[i], lg)
		}
	}
	if sums == 0 {
		t.Fatal("no graph of the tiny model is in the sum form: the test needs some")
	}
	lower := &forms{h: server.New(local.New(scorertest.Tiny(), local.WithPolicyVersion(7))).Handler()}
	noLower := &forms{h: server.New(local.New(scorertest.Tiny(), local.WithPolicyVersion(7))).Handler(), hideLower: true}
	js := &forms{h: server.New(local.New(scorertest.Tiny(), local.WithPolicyVersion(7))).Handler(), hideBinary: true}
	for _, f := range []*forms{lower, noLower, js} {
		url, _ := scorertest.ServeHandler(t, f)
		c := newClient(t, []string{url}, client.WithMaxWait(0))
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := c.Attention(context.Background(), jobs, scorer.AttentionOptions{Lower: true})
		if err != nil {
			t.Fatal(err)
		}
		if got.Graphs != nil {
			t.Errorf("%s: a lower answer carries K×K graphs too", url)
		}
		full, err := c.Attention(context.Background(), jobs, scorer.AttentionOptions{})
		if err != nil || full.PolicyVersion != got.PolicyVersion || got.PolicyVersion != 7 {
			t.Errorf("%s: policy version %d, the K×K answer says %d (%v), the server's is 7", url, got.PolicyVersion, full.PolicyVersion, err)
		}
		scorertest.EqualLowerGraphs(t, url, got.Lower, want)
	}
	if lower.lowerAnswers.Load() < 1 || noLower.lowerAnswers.Load() != 0 || js.lowerAnswers.Load() != 0 {
		t.Errorf("lower-graphs answers: %d from the server with %q, %d and %d from those without; want some, none and none",
			lower.lowerAnswers.Load(), protocol.FeatureLowerGraphs, noLower.lowerAnswers.Load(), js.lowerAnswers.Load())
	}
	if lower.binaryJobs.Load() < 1 || noLower.binaryJobs.Load() < 1 || js.binaryJobs.Load() != 0 {
		t.Errorf("binary attention requests: %d and %d to the servers with %q, %d to the one without; want some, some and none",
			lower.binaryJobs.Load(), noLower.binaryJobs.Load(), protocol.FeatureBinaryJobs, js.binaryJobs.Load())
	}
	if noLower.binAnswers.Load() < 1 {
		t.Errorf("the server without %q sent no binary K×K answer", protocol.FeatureLowerGraphs)
	}

	// Both kinds of caller on one client, batched together or not.
	url, _ := scorertest.ServeHandler(t, lower)
	c := newClient(t, []string{url}, client.WithMaxWait(20*time.Millisecond))
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			got, err := c.Attention(context.Background(), jobs, scorer.AttentionOptions{Lower: true})
			if err != nil {
				t.Error(err)
				return
			}
			scorertest.EqualLowerGraphs(t, "lower caller", got.Lower, want)
		}()
		go func() {
			defer wg.Done()
			got, err := scorertest.Graphs(c.Attention(context.Background(), jobs, scorer.AttentionOptions{}))
			if err != nil {
				t.Error(err)
				return
			}
			scorertest.EqualGraphs(t, "K×K caller", got, full)
		}()
	}
	wg.Wait()
}
