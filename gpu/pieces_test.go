package gpu

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
)

// compactOf rewrites a set in the compact form: the first row's context is
// the set's tokens, and every row is the longest prefix and suffix it shares
// with them as spans around literal ids.
func compactOf(s RowSet) RowSet {
	base := s.Rows[0].Context
	out := RowSet{ID: s.ID, Tokens: base, Pieces: make([][]Piece, len(s.Rows))}
	for j, r := range s.Rows {
		c := r.Context
		p := 0
		for p < len(c) && p < len(base) && c[p] == base[p] {
			p++
		}
		q := 0
		for q < len(c)-p && q < len(base)-p && c[len(c)-1-q] == base[len(base)-1-q] {
			q++
		}
		ps := []Piece{{Start: 0, End: p}}
		if mid := c[p : len(c)-q]; len(mid) > 0 {
			ps = append(ps, Piece{Literal: append(Tokens{}, mid...)})
		}
		if q > 0 {
			ps = append(ps, Piece{Start: len(base) - q, End: len(base)})
		}
		out.Pieces[j] = ps
		r.Context = nil
		out.Rows = append(out.Rows, r)
	}
	return out
}

func TestCompactRowsMatchFullRows(t *testing.T) {
	url, _ := serveScorer(t, NewServer(NewLocal(tiny())))
	full := makeSets(21, 6, 3)
	compact := make([]RowSet, len(full))
	for i, s := range full {
		compact[i] = compactOf(s)
		if e, err := ExpandSet(compact[i]); err != nil || len(e.Rows) != len(s.Rows) {
			t.Fatalf("ExpandSet: %v", err)
		} else {
			for j := range s.Rows {
				if !slicesEqual(e.Rows[j].Context, s.Rows[j].Context) {
					t.Fatalf("set %d row %d: compact form does not expand to the context", i, j)
				}
			}
		}
	}
	fullBody, _ := appendScoreRequest(nil, full, false)
	compactBody, _ := appendScoreRequest(nil, compact, true)
	fallbackBody, _ := appendScoreRequest(nil, compact, false)
	if !bytes.Equal(fullBody, fallbackBody) {
		t.Fatal("the full form of compact sets differs from the full sets' request")
	}
	if len(compactBody)*2 > len(fullBody) {
		t.Fatalf("compact request %d bytes, full %d: not even half", len(compactBody), len(fullBody))
	}
	h := map[string]string{ProtocolHeader: ProtocolVersion, "Content-Type": "application/json"}
	a, b := postOK(t, url+PathScore, h, fullBody), postOK(t, url+PathScore, h, compactBody)
	if !bytes.Equal(a, b) {
		t.Fatalf("server answers differ for compact and full requests:\n%s\n%s", a, b)
	}
	want := expectedScores(t, full)
	c := newClient(t, []string{url})
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(info.Features, ","), FeatureRowPieces) {
		t.Fatalf("server info features %v lack %s", info.Features, FeatureRowPieces)
	}
	got, err := c.ScoreRows(context.Background(), compact)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "client, compact sets", got, want)
	local, err := NewLocal(tiny()).ScoreRows(context.Background(), compact)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "Local, compact sets", local, want)
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
	if r.URL.Path == PathInfo {
		rec := httptest.NewRecorder()
		o.h.ServeHTTP(rec, r)
		var info map[string]any
		json.Unmarshal(rec.Body.Bytes(), &info)
		delete(info, "features")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(info)
		return
	}
	if r.URL.Path == PathScore {
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
	old := &oldServer{h: NewServer(NewLocal(tiny())).Handler()}
	oldURL, _ := serveHandler(t, old)
	cnt := &counter{h: NewServer(NewLocal(tiny())).Handler()}
	newURL, _ := serveHandler(t, cnt)
	full := makeSets(22, 8, 2)
	compact := make([]RowSet, len(full))
	for i, s := range full {
		compact[i] = compactOf(s)
	}
	want := expectedScores(t, full)
	c := newClient(t, []string{oldURL, newURL}, WithMaxWait(0))
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range compact {
		got, err := c.ScoreRows(context.Background(), compact[i:i+1])
		if err != nil {
			t.Fatalf("set %d: %v", i, err)
		}
		equalScores(t, "mixed fleet", got, want[i:i+1])
	}
	if n := old.compact.Load(); n != 0 {
		t.Fatalf("the client sent %d compact requests to a server without %s", n, FeatureRowPieces)
	}
	if old.full.Load() == 0 {
		t.Fatal("no request reached the server without the feature")
	}
	if cnt.score.Load() == 0 {
		t.Fatal("no request reached the server with the feature")
	}
}

func TestInvalidPiecesAreRejected(t *testing.T) {
	url, _ := serveScorer(t, NewServer(NewLocal(tiny())))
	h := map[string]string{ProtocolHeader: ProtocolVersion, "Content-Type": "application/json"}
	// tokens [1 2 3], target [3 4], placeholder literal [5]
	const set = `{"id":"s","tokens":"AQAAAAIAAAADAAAA","target":"AwAAAAQAAAA=","span":[0,2],"rows":[%s]}`
	ok := `{"pieces":[[0,1],"BQAAAA==",[2,3]]}`
	if st, eb := post(t, url+PathScore, h, []byte(`{"sets":[`+strings.Replace(set, "%s", ok, 1)+`]}`)); st != 200 {
		t.Fatalf("valid compact request: %d %+v", st, eb)
	}
	for _, c := range []struct{ row, want string }{
		{`{"pieces":[[0,4]]}`, "piece 0: span [0, 4)"},
		{`{"pieces":[[-1,2]]}`, "piece 0: span [-1, 2)"},
		{`{"pieces":[[2,1]]}`, "piece 0: span [2, 1)"},
		{`{"pieces":[[0,1],[1,9]]}`, "piece 1"},
		{`{"pieces":[[0,1]],"context":"AQAAAA=="}`, "both"},
		{`{"pieces":[[0,1,2]]}`, "piece"},
		{`{"pieces":[1]}`, "piece"},
		{`{"pieces":["AQA"]}`, "base64"},
		{`{"pieces":["/////w=="]}`, "outside the vocabulary"},
	} {
		st, eb := post(t, url+PathScore, h, []byte(`{"sets":[`+strings.Replace(set, "%s", c.row, 1)+`]}`))
		if st != 400 || eb.Code != CodeBadRequest || !strings.Contains(eb.Error, c.want) {
			t.Errorf("row %s: status %d %+v, want 400 bad_request mentioning %q", c.row, st, eb, c.want)
		}
	}
	// a span piece without set tokens
	st, eb := post(t, url+PathScore, h, []byte(`{"sets":[{"rows":[{"pieces":[[0,1]],"target":"AwAAAA==","span":[0,1]}]}]}`))
	if st != 400 || !strings.Contains(eb.Error, "set's 0 tokens") {
		t.Errorf("span piece without set tokens: %d %+v", st, eb)
	}
	// a row without a span and no set target
	st, eb = post(t, url+PathScore, h, []byte(`{"sets":[{"rows":[{"context":"AQAAAA==","target":"AwAAAA=="}]}]}`))
	if st != 400 || eb.Code != CodeBadRequest {
		t.Errorf("row without span: %d %+v", st, eb)
	}
}
