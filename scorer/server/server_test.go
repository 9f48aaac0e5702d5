package server

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

func TestServerStatusCodes(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 4)
	slow := &scorertest.Gated{Scorer: local.New(scorertest.Tiny()), Gate: block, Entered: entered}
	srv := New(slow, WithMaxRequestBytes(60000), WithMaxRows(10), WithMaxConcurrentRequests(1))
	url, _ := scorertest.Serve(t, srv)
	v1 := map[string]string{protocol.Header: protocol.Version}
	body, _ := json.Marshal(protocol.SetsToWire(scorertest.MakeSets(1, 1, 1)))

	if st, eb := scorertest.Post(t, url+protocol.PathScore, nil, body); st != 400 || eb.Code != scorer.CodeVersionMismatch {
		t.Errorf("no protocol header: %d %s, want 400 version_mismatch", st, eb.Code)
	}
	if st, eb := scorertest.Post(t, url+protocol.PathScore, map[string]string{protocol.Header: "creditflow.scorer/v0"}, body); st != 400 || eb.Code != scorer.CodeVersionMismatch {
		t.Errorf("old protocol header: %d %s", st, eb.Code)
	}
	if st, eb := scorertest.Post(t, url+protocol.PathScore, v1, []byte(`{"sets": [`)); st != 400 || eb.Code != scorer.CodeBadRequest {
		t.Errorf("broken JSON: %d %s", st, eb.Code)
	}
	big, _ := json.Marshal(protocol.SetsToWire(scorertest.MakeSets(2, 40, 5)))
	if st, eb := scorertest.Post(t, url+protocol.PathScore, v1, big); st != 413 || eb.Code != scorer.CodeTooLarge {
		t.Errorf("%d-byte body over 60000: %d %s", len(big), st, eb.Code)
	}
	many := scorertest.MakeSets(2, 6, 3) // 6 sets of 2..4 rows: more than 10 rows
	rows := 0
	for _, s := range many {
		rows += len(s.Rows)
	}
	manyBody, _ := json.Marshal(protocol.SetsToWire(many))
	if st, eb := scorertest.Post(t, url+protocol.PathScore, v1, manyBody); rows <= 10 || st != 413 || eb.Code != scorer.CodeTooLarge {
		t.Errorf("%d rows over 10: %d %s", rows, st, eb.Code)
	}
	bad := scorertest.MakeSets(3, 2, 2)
	bad[1].Rows[0].Target[0] = cpumodel.TinyVocab + 5
	badBody, _ := json.Marshal(protocol.SetsToWire(bad))
	close(block) // let the scorer run from here on
	st, eb := scorertest.Post(t, url+protocol.PathScore, v1, badBody)
	if st != 400 || eb.Code != scorer.CodeBadRequest || eb.Item == nil || *eb.Item != 1 || eb.ID != "traj-1" {
		t.Errorf("bad token: %d %+v, want 400 bad_request item 1", st, eb)
	}
	req, _ := http.NewRequest(http.MethodGet, url+protocol.PathScore, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Errorf("GET /v1/score: %v %v, want 405", resp.StatusCode, err)
	}
	scorertest.Get(t, url+"/v2/score", 404)
	if st, _ := scorertest.Post(t, url+protocol.PathScore, v1, body); st != 200 {
		t.Errorf("valid request: %d", st)
	}
}

func TestServerOverloaded(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 4)
	url, _ := scorertest.Serve(t, New(&scorertest.Gated{Scorer: local.New(scorertest.Tiny()), Gate: block, Entered: entered}, WithMaxConcurrentRequests(1)))
	v1 := map[string]string{protocol.Header: protocol.Version}
	body, _ := json.Marshal(protocol.SetsToWire(scorertest.MakeSets(1, 1, 1)))
	done := make(chan int)
	go func() {
		st, _ := scorertest.Post(t, url+protocol.PathScore, v1, body)
		done <- st
	}()
	<-entered // the first request holds the only slot
	if st, eb := scorertest.Post(t, url+protocol.PathScore, v1, body); st != 503 || eb.Code != scorer.CodeOverloaded {
		t.Errorf("second concurrent request: %d %s, want 503 overloaded", st, eb.Code)
	}
	close(block)
	if st := <-done; st != 200 {
		t.Errorf("first request: %d", st)
	}
}

func TestInvalidPiecesAreRejected(t *testing.T) {
	url, _ := scorertest.Serve(t, New(local.New(scorertest.Tiny())))
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": "application/json"}
	// tokens [1 2 3], target [3 4], placeholder literal [5]
	const set = `{"id":"s","tokens":"AQAAAAIAAAADAAAA","target":"AwAAAAQAAAA=","span":[0,2],"rows":[%s]}`
	ok := `{"pieces":[[0,1],"BQAAAA==",[2,3]]}`
	if st, eb := scorertest.Post(t, url+protocol.PathScore, h, []byte(`{"sets":[`+strings.Replace(set, "%s", ok, 1)+`]}`)); st != 200 {
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
		st, eb := scorertest.Post(t, url+protocol.PathScore, h, []byte(`{"sets":[`+strings.Replace(set, "%s", c.row, 1)+`]}`))
		if st != 400 || eb.Code != scorer.CodeBadRequest || !strings.Contains(eb.Error, c.want) {
			t.Errorf("row %s: status %d %+v, want 400 bad_request mentioning %q", c.row, st, eb, c.want)
		}
	}
	// a span piece without set tokens
	st, eb := scorertest.Post(t, url+protocol.PathScore, h, []byte(`{"sets":[{"rows":[{"pieces":[[0,1]],"target":"AwAAAA==","span":[0,1]}]}]}`))
	if st != 400 || !strings.Contains(eb.Error, "set's 0 tokens") {
		t.Errorf("span piece without set tokens: %d %+v", st, eb)
	}
	// a row without a span and no set target
	st, eb = scorertest.Post(t, url+protocol.PathScore, h, []byte(`{"sets":[{"rows":[{"context":"AQAAAA==","target":"AwAAAA=="}]}]}`))
	if st != 400 || eb.Code != scorer.CodeBadRequest {
		t.Errorf("row without span: %d %+v", st, eb)
	}
}

// A malformed binary body is a 400 naming the media type, and an invalid
// row in a valid body is rejected as in JSON.
func TestServerRejectsBadBinaryRequests(t *testing.T) {
	url, _ := scorertest.Serve(t, New(local.New(scorertest.Tiny())))
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": protocol.MediaTypeRows + "; charset=binary"}
	good, _ := protocol.AppendRowsRequest(nil, scorertest.MakeSets(4, 1, 1), false)
	if st, eb := scorertest.Post(t, url+protocol.PathScore, h, good); st != 200 {
		t.Fatalf("valid binary request: %d %+v", st, eb)
	}
	st, eb := scorertest.Post(t, url+protocol.PathScore, h, good[:len(good)-1])
	if st != 400 || eb.Code != scorer.CodeBadRequest || !strings.Contains(eb.Error, protocol.MediaTypeRows) {
		t.Errorf("truncated body: %d %+v", st, eb)
	}
	bad, _ := protocol.AppendRowsRequest(nil, []scorer.RowSet{{ID: "s", Rows: []scorer.Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{1, 0}}}}}, false)
	st, eb = scorertest.Post(t, url+protocol.PathScore, h, bad)
	if st != 400 || eb.Code != scorer.CodeBadRequest || eb.ID != "s" {
		t.Errorf("reversed span: %d %+v", st, eb)
	}
	inf, _ := protocol.AppendRowsRequest(nil, []scorer.RowSet{{Rows: []scorer.Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{0, 1}, Temperature: math.Inf(1)}}}}, false)
	if st, eb = scorertest.Post(t, url+protocol.PathScore, h, inf); st != 400 || !strings.Contains(eb.Error, "finite") {
		t.Errorf("infinite temperature: %d %+v", st, eb)
	}
	many, _ := protocol.AppendRowsRequest(nil, scorertest.MakeSets(3, 2, 1), false)
	url2, _ := scorertest.Serve(t, New(local.New(scorertest.Tiny()), WithMaxRows(5)))
	if st, eb = scorertest.Post(t, url2+protocol.PathScore, h, many); st != http.StatusRequestEntityTooLarge || eb.Code != scorer.CodeTooLarge {
		t.Errorf("more rows than a server of 5 takes: %d %+v", st, eb)
	}
}

// Request bodies are read into recycled buffers: whatever a buffer held
// before, a body comes back byte for byte, whether it states its length,
// states none (chunked), or outgrows the buffer it was handed.
func TestServerReadBodyReusesBuffers(t *testing.T) {
	s := New(local.New(scorertest.Tiny()), WithMaxRequestBytes(1<<20))
	r := rand.New(rand.NewPCG(5, 6))
	for i, n := range []int{70000, 10, 0, 5000, 300000, 1, 4096, 123457} {
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(r.Uint32())
		}
		length := int64(n)
		if i%3 == 2 {
			length = -1 // unknown: read as it comes
		}
		data, err := s.readBody(bytes.NewReader(body), length)
		if err != nil {
			t.Fatalf("body %d (%d bytes): %v", i, n, err)
		}
		if !bytes.Equal(*data, body) {
			t.Fatalf("body %d (%d bytes, length %d): read back %d bytes that differ", i, n, length, len(*data))
		}
		s.bodies.Put(data)
	}
}
