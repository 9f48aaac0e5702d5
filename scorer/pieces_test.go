package scorer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
)

func TestCompactRowsMatchFullRows(t *testing.T) {
	url, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny())))
	full := scorertest.MakeSets(21, 6, 3)
	compact := make([]scorer.RowSet, len(full))
	for i, s := range full {
		compact[i] = scorertest.CompactOf(s)
		if e, err := scorer.ExpandSet(compact[i]); err != nil || len(e.Rows) != len(s.Rows) {
			t.Fatalf("ExpandSet: %v", err)
		} else {
			for j := range s.Rows {
				if !slicesEqual(e.Rows[j].Context, s.Rows[j].Context) {
					t.Fatalf("set %d row %d: compact form does not expand to the context", i, j)
				}
			}
		}
	}
	fullBody, _ := protocol.AppendScoreRequest(nil, full, false)
	compactBody, _ := protocol.AppendScoreRequest(nil, compact, true)
	fallbackBody, _ := protocol.AppendScoreRequest(nil, compact, false)
	if !bytes.Equal(fullBody, fallbackBody) {
		t.Fatal("the full form of compact sets differs from the full sets' request")
	}
	if len(compactBody)*2 > len(fullBody) {
		t.Fatalf("compact request %d bytes, full %d: not even half", len(compactBody), len(fullBody))
	}
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": "application/json"}
	a, b := postOK(t, url+protocol.PathScore, h, fullBody), postOK(t, url+protocol.PathScore, h, compactBody)
	if !bytes.Equal(a, b) {
		t.Fatalf("server answers differ for compact and full requests:\n%s\n%s", a, b)
	}
	want := scorertest.ExpectedScores(t, full)
	c := newClient(t, []string{url})
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(info.Features, ","), protocol.FeatureRowPieces) {
		t.Fatalf("server info features %v lack %s", info.Features, protocol.FeatureRowPieces)
	}
	got, _, err := c.ScoreRows(context.Background(), compact)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "client, compact sets", got, want)
	local, _, err := local.New(scorertest.Tiny()).ScoreRows(context.Background(), compact)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "Local, compact sets", local, want)
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func postOK(t *testing.T, url string, h map[string]string, body []byte) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	return data
}

// oldServer is a server from before FeatureRowPieces: its info has no
// features and it refuses any request that has pieces.
type oldServer struct {
	h             http.Handler
	compact, full atomic.Int64
}

func (o *oldServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == protocol.PathInfo {
		rec := httptest.NewRecorder()
		o.h.ServeHTTP(rec, r)
		var info map[string]any
		json.Unmarshal(rec.Body.Bytes(), &info)
		delete(info, "features")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(info)
		return
	}
	if r.URL.Path == protocol.PathScore {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"pieces"`)) {
			o.compact.Add(1)
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"set 0 row 0: no context","code":"bad_request","item":0}`))
			return
		}
		o.full.Add(1)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	o.h.ServeHTTP(w, r)
}

func TestClientFallsBackToFullRowsPerEndpoint(t *testing.T) {
	old := &oldServer{h: server.New(local.New(scorertest.Tiny())).Handler()}
	oldURL, _ := scorertest.ServeHandler(t, old)
	cnt := &counter{h: server.New(local.New(scorertest.Tiny())).Handler()}
	newURL, _ := scorertest.ServeHandler(t, cnt)
	full := scorertest.MakeSets(22, 8, 2)
	compact := make([]scorer.RowSet, len(full))
	for i, s := range full {
		compact[i] = scorertest.CompactOf(s)
	}
	want := scorertest.ExpectedScores(t, full)
	c := newClient(t, []string{oldURL, newURL}, client.WithMaxWait(0))
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range compact {
		got, _, err := c.ScoreRows(context.Background(), compact[i:i+1])
		if err != nil {
			t.Fatalf("set %d: %v", i, err)
		}
		scorertest.EqualScores(t, "mixed fleet", got, want[i:i+1])
	}
	if n := old.compact.Load(); n != 0 {
		t.Fatalf("the client sent %d compact requests to a server without %s", n, protocol.FeatureRowPieces)
	}
	if old.full.Load() == 0 {
		t.Fatal("no request reached the server without the feature")
	}
	if cnt.score.Load() == 0 {
		t.Fatal("no request reached the server with the feature")
	}
}
