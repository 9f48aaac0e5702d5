package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// randomSets: sets of full and compact rows with every optional field
// present and absent, empty arrays included.
func randomSets(r *rand.Rand, n int) []RowSet {
	toks := func(n int) []int32 {
		if n < 0 {
			return nil
		}
		out := make([]int32, n)
		for i := range out {
			out[i] = r.Int32() - r.Int32()
		}
		return out
	}
	var sets []RowSet
	for s := 0; s < n; s++ {
		set := RowSet{ID: []string{"", "t-1", `q<1>&"x"\é`}[r.IntN(3)]}
		target, span := toks(1+r.IntN(9)), [2]int{r.IntN(3), 3 + r.IntN(9)}
		shared := r.IntN(2) == 0
		if r.IntN(2) == 0 { // compact
			set.Tokens = toks(r.IntN(50))
		}
		for j := 0; j < r.IntN(5); j++ {
			row := Row{Target: target, Span: span, Temperature: []float64{0, 1, 0.7, 1.0 / 3, 1e-300}[r.IntN(5)]}
			if !shared {
				row.Target, row.Span = toks(r.IntN(6)-1), [2]int{r.IntN(9) - 2, r.IntN(99)}
			}
			if set.Tokens != nil {
				var ps []Piece
				for k := 0; k < r.IntN(4); k++ {
					if r.IntN(3) == 0 {
						ps = append(ps, Piece{Literal: toks(r.IntN(3))})
					} else {
						a := r.IntN(len(set.Tokens) + 1)
						ps = append(ps, Piece{Start: a, End: a + r.IntN(len(set.Tokens)-a+1)})
					}
				}
				if ps == nil {
					ps = []Piece{}
				}
				set.Pieces = append(set.Pieces, ps)
			} else {
				row.Context = toks(r.IntN(40) - 1)
			}
			set.Rows = append(set.Rows, row)
		}
		sets = append(sets, set)
	}
	return sets
}

// noLimit: no row or piece limit while decoding.
const noLimit = math.MaxInt32

// A binary score request decodes to exactly the ScoreRequest its JSON form
// decodes to, in the full and the compact form.
func TestRowsRequestMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := [][]RowSet{nil, {}, {{}}, {{ID: "x", Rows: []Row{{}}}},
		// an empty literal (the smallest piece, 5 bytes) last in the body
		{{Tokens: []int32{1, 2}, Rows: []Row{{Target: []int32{3}}}, Pieces: [][]Piece{{{Start: 0, End: 2}, {Literal: []int32{}}}}}},
		{{Tokens: []int32{}, Rows: []Row{{}}, Pieces: [][]Piece{{{Literal: []int32{}}}}}},
	}
	for k := 0; k < 200; k++ {
		cases = append(cases, randomSets(r, r.IntN(5)))
	}
	for i, sets := range cases {
		for _, compact := range []bool{false, true} {
			js, err := appendScoreRequest(nil, sets, compact)
			if err != nil {
				t.Fatal(err)
			}
			var want ScoreRequest
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			bin, err := appendRowsRequest(nil, sets, compact)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeRowsRequest(bin, noLimit, noLimit)
			if err != nil {
				t.Fatalf("case %d compact=%v: %v", i, compact, err)
			}
			if want.Sets == nil { // JSON "sets":[] of no sets
				want.Sets = []WireRowSet{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d compact=%v:\n got %+v\nwant %+v\nJSON %s", i, compact, got, want, js)
			}
		}
	}
}

// Every malformed body is an error, never a panic or a huge allocation.
func TestRowsRequestRejectsMalformedBodies(t *testing.T) {
	sets := randomSets(rand.New(rand.NewPCG(5, 6)), 3)
	sets = append(sets, compactOf(makeSets(1, 1, 1)[0]))
	valid, err := appendRowsRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeRowsRequest(valid, noLimit, noLimit); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(valid); n++ {
		if _, err := decodeRowsRequest(valid[:n], noLimit, noLimit); err == nil {
			t.Fatalf("a body cut to %d of %d bytes decoded", n, len(valid))
		}
	}
	bad := map[string][]byte{
		"trailing byte":    append(append([]byte{}, valid...), 0),
		"magic":            append([]byte("CFR2"), valid[4:]...),
		"huge set count":   append([]byte(magicRows), 0xff, 0xff, 0xff, 0x7f),
		"unknown set flag": {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0},
		"unknown row flag": {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 32},
		"piece kind":       {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0},
		"huge ids":         {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		"id not UTF-8":     {'C', 'F', 'R', '1', 1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0, 0, 0, 0, 0},
	}
	for name, b := range bad {
		if req, err := decodeRowsRequest(b, noLimit, noLimit); err == nil {
			t.Errorf("%s: decoded to %+v", name, req)
		}
	}
}

// The scorer's limits apply while a binary request is read: too many sets,
// rows or pieces is a CodeTooLarge rejection, whatever the body's size.
func TestRowsRequestLimits(t *testing.T) {
	sets := []RowSet{compactOf(makeSets(1, 3, 2)[0]), compactOf(makeSets(1, 3, 2)[0])}
	b, err := appendRowsRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	req, err := decodeRowsRequest(b, noLimit, noLimit)
	if err != nil {
		t.Fatal(err)
	}
	rows, pieces := 0, 0
	for _, s := range req.Sets {
		rows += len(s.Rows)
		for _, w := range s.Rows {
			pieces += len(w.Pieces)
		}
	}
	if rows < 4 || pieces < 4 {
		t.Fatalf("fixture has %d rows and %d pieces; want several", rows, pieces)
	}
	if _, err := decodeRowsRequest(b, rows, pieces); err != nil {
		t.Errorf("at its limits exactly: %v", err)
	}
	empty, err := appendRowsRequest(nil, []RowSet{{}, {}, {}}, true) // three sets of no rows
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		body      []byte
		rows, pcs int
	}{"rows": {b, rows - 1, pieces}, "pieces": {b, rows, pieces - 1}, "sets": {empty, 2, noLimit}} {
		_, err := decodeRowsRequest(c.body, c.rows, c.pcs)
		var rej *RejectedError
		if !errors.As(err, &rej) || rej.Code != CodeTooLarge {
			t.Errorf("one over the %s limit: %v; want a %s rejection", name, err, CodeTooLarge)
		}
	}
	if _, err := decodeRowsRequest(empty, 3, noLimit); err != nil {
		t.Errorf("three empty sets at a limit of 3: %v", err)
	}
	// A million one-byte rows are refused before a hundred bytes each are allocated.
	huge := append([]byte(magicRows), 1, 0, 0, 0, 0, 0, 0, 0, 0)
	huge = binary.LittleEndian.AppendUint32(huge, 1<<20)
	huge = append(huge, make([]byte, 1<<20)...)
	var rej *RejectedError
	if _, err := decodeRowsRequest(huge, 65536, noLimit); !errors.As(err, &rej) || rej.Code != CodeTooLarge {
		t.Errorf("2^20 empty rows: %v", err)
	}
	if _, err := decodeRowsRequest(huge, noLimit, noLimit); err != nil {
		t.Errorf("2^20 empty rows without a limit: %v", err)
	}
}

func FuzzDecodeRowsRequest(f *testing.F) {
	for _, sets := range [][]RowSet{makeSets(2, 2, 2), {compactOf(makeSets(3, 1, 1)[0])}} {
		b, _ := appendRowsRequest(nil, sets, true)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRowsRequest(b, 4096, 4096)
		if err != nil {
			return
		}
		// What decodes is a request that JSON carries unchanged (the server
		// rejects temperatures that are not finite, which JSON cannot carry).
		for _, s := range req.Sets {
			for _, w := range s.Rows {
				if w.Temperature != nil && (math.IsNaN(*w.Temperature) || math.IsInf(*w.Temperature, 0)) {
					return
				}
			}
		}
		js, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var back ScoreRequest
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if back.Sets == nil {
			back.Sets = []WireRowSet{}
		}
		if !reflect.DeepEqual(back, req) { // reflect compares floats by ==: -0 and 0 alike
			t.Fatalf("JSON changed the request:\n got %+v\nwant %+v", back, req)
		}
	})
}

// A graphs body decodes only when it is exactly the encoding of what it
// decodes to; no length in it can panic or allocate past the body.
func FuzzDecodeGraphs(f *testing.F) {
	b, _ := appendGraphs(nil, AttentionResponse{Results: []WireJobResult{{Graphs: []WireGraph{{Layer: 1, AA: [][]float64{{1}}, AO: [][]float64{{2}}}}}}})
	f.Add(b)
	for _, k := range []uint32{1 << 30, 1 << 31, 3 << 30, 1<<32 - 1, 1 << 16} {
		f.Add(binary.LittleEndian.AppendUint32(append([]byte(magicGraphs), 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0), k))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := decodeGraphs(b)
		if err != nil {
			return
		}
		again, err := appendGraphs(nil, resp)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decoded %x to %+v, which encodes to %x (%v)", b, resp, again, err)
		}
	})
}

// A graph whose sides overflow 64 bits when multiplied is an error, not a panic.
func TestDecodeGraphsHugeSides(t *testing.T) {
	for _, k := range []uint32{1 << 30, 1 << 31, 3 << 30, 1<<32 - 1} {
		b := binary.LittleEndian.AppendUint32(append([]byte(magicGraphs), 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0), k)
		if resp, err := decodeGraphs(b); err == nil {
			t.Errorf("K = %d decoded to %+v", k, resp)
		}
	}
}

// The binary answer holds only square graphs: another shape is an error,
// not reshaped.
func TestAppendGraphsRejectsOtherShapes(t *testing.T) {
	sq := [][]float64{{1, 2}, {3, 4}}
	for name, g := range map[string]WireGraph{
		"jagged AO":       {AA: sq, AO: [][]float64{{1}, {2, 3, 4}}},
		"AO of other K":   {AA: sq, AO: [][]float64{{1}}},
		"AA not square":   {AA: [][]float64{{1, 2, 3}, {4}}, AO: sq},
		"AO with no rows": {AA: sq},
	} {
		if _, err := appendGraphs(nil, AttentionResponse{Results: []WireJobResult{{Graphs: []WireGraph{g}}}}); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	if _, err := appendGraphs(nil, AttentionResponse{Results: []WireJobResult{{Graphs: []WireGraph{{AA: sq, AO: sq}}}}}); err != nil {
		t.Error(err)
	}
}

// The binary graphs body carries every float64 bit for bit.
func TestGraphsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	v := int64(-3)
	for _, pv := range []*int64{nil, &v} {
		resp := AttentionResponse{PolicyVersion: pv}
		for j := 0; j < 3; j++ {
			var res WireJobResult
			for l := 0; l < j+1; l++ {
				k := r.IntN(6)
				g := WireGraph{Layer: l*7 - 1, AA: make([][]float64, k), AO: make([][]float64, k)}
				for x := 0; x < k; x++ {
					g.AA[x], g.AO[x] = make([]float64, k), make([]float64, k)
					for y := 0; y < k; y++ {
						g.AA[x][y] = r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
						g.AO[x][y] = []float64{0, math.Copysign(0, -1), math.SmallestNonzeroFloat64, 1.0 / 3}[r.IntN(4)]
					}
				}
				res.Graphs = append(res.Graphs, g)
			}
			resp.Results = append(resp.Results, res)
		}
		b, err := appendGraphs(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeGraphs(b)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%#v", bitsOf(got)) != fmt.Sprintf("%#v", bitsOf(resp)) ||
			(got.PolicyVersion == nil) != (pv == nil) || (pv != nil && *got.PolicyVersion != *pv) {
			t.Fatalf("round trip changed the answer:\n got %+v\nwant %+v", got, resp)
		}
		for n := 0; n < len(b); n++ {
			if _, err := decodeGraphs(b[:n]); err == nil {
				t.Fatalf("a graphs body cut to %d of %d bytes decoded", n, len(b))
			}
		}
	}
}

// bitsOf lists an answer's layers, sizes and float64 bits (-0 differs from 0).
func bitsOf(resp AttentionResponse) []uint64 {
	var out []uint64
	for _, res := range resp.Results {
		out = append(out, uint64(len(res.Graphs)))
		for _, g := range res.Graphs {
			out = append(out, uint64(g.Layer), uint64(len(g.AA)))
			for _, m := range [][][]float64{g.AA, g.AO} {
				for _, row := range m {
					for _, x := range row {
						out = append(out, math.Float64bits(x))
					}
				}
			}
		}
	}
	return out
}

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
	case PathInfo:
		if f.hideBinary {
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, r)
			var info ModelInfo
			_ = json.Unmarshal(rec.Body.Bytes(), &info)
			info.Features = []string{FeatureRowPieces}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(info)
			return
		}
	case PathScore:
		if isMediaType(r.Header.Get("Content-Type"), MediaTypeRows) {
			f.binary.Add(1)
		} else {
			f.json.Add(1)
		}
	case PathAttention:
		if accepts(r.Header.Get("Accept"), MediaTypeGraphs) {
			f.binary.Add(1)
		} else {
			f.json.Add(1)
		}
	}
	f.h.ServeHTTP(w, r)
	if r.URL.Path == PathAttention && isMediaType(w.Header().Get("Content-Type"), MediaTypeGraphs) {
		f.binAnswers.Add(1)
	}
}

// The client speaks binary to servers that advertise it and JSON to the
// others, and the answers are the same.
func TestClientUsesBinaryBodiesPerEndpoint(t *testing.T) {
	bin := &forms{h: NewServer(NewLocal(tiny())).Handler()}
	binURL, _ := serveHandler(t, bin)
	js := &forms{h: NewServer(NewLocal(tiny())).Handler(), hideBinary: true}
	jsURL, _ := serveHandler(t, js)
	full := makeSets(31, 6, 2)
	sets := make([]RowSet, len(full))
	for i, s := range full {
		sets[i] = compactOf(s)
	}
	jobs := makeJobs(32, 3)
	wantScores, wantGraphs := expectedScores(t, full), expectedGraphs(t, jobs)
	for _, url := range []string{binURL, jsURL} {
		c := newClient(t, []string{url}, WithMaxWait(0))
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := c.ScoreRows(context.Background(), sets)
		if err != nil {
			t.Fatal(err)
		}
		equalScores(t, url, got, wantScores)
		graphs, err := c.Attention(context.Background(), jobs)
		if err != nil {
			t.Fatal(err)
		}
		equalGraphs(t, url, graphs, wantGraphs)
	}
	if bin.binary.Load() < 2 || bin.json.Load() != 0 {
		t.Errorf("server with %q: %d binary, %d JSON requests; want only binary", FeatureBinary, bin.binary.Load(), bin.json.Load())
	}
	if bin.binAnswers.Load() < 1 || js.binAnswers.Load() != 0 {
		t.Errorf("binary attention answers: %d from the server with %q, %d from the one without; want some and none",
			bin.binAnswers.Load(), FeatureBinary, js.binAnswers.Load())
	}
	if js.binary.Load() != 0 || js.json.Load() < 2 {
		t.Errorf("server without %q: %d binary, %d JSON requests; want only JSON", FeatureBinary, js.binary.Load(), js.json.Load())
	}
}

// A malformed binary body is a 400 naming the media type, and an invalid
// row in a valid body is rejected as in JSON.
func TestServerRejectsBadBinaryRequests(t *testing.T) {
	url, _ := serveScorer(t, NewServer(NewLocal(tiny())))
	h := map[string]string{ProtocolHeader: ProtocolVersion, "Content-Type": MediaTypeRows + "; charset=binary"}
	good, _ := appendRowsRequest(nil, makeSets(4, 1, 1), false)
	if st, eb := post(t, url+PathScore, h, good); st != 200 {
		t.Fatalf("valid binary request: %d %+v", st, eb)
	}
	st, eb := post(t, url+PathScore, h, good[:len(good)-1])
	if st != 400 || eb.Code != CodeBadRequest || !strings.Contains(eb.Error, MediaTypeRows) {
		t.Errorf("truncated body: %d %+v", st, eb)
	}
	bad, _ := appendRowsRequest(nil, []RowSet{{ID: "s", Rows: []Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{1, 0}}}}}, false)
	st, eb = post(t, url+PathScore, h, bad)
	if st != 400 || eb.Code != CodeBadRequest || eb.ID != "s" {
		t.Errorf("reversed span: %d %+v", st, eb)
	}
	inf, _ := appendRowsRequest(nil, []RowSet{{Rows: []Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{0, 1}, Temperature: math.Inf(1)}}}}, false)
	if st, eb = post(t, url+PathScore, h, inf); st != 400 || !strings.Contains(eb.Error, "finite") {
		t.Errorf("infinite temperature: %d %+v", st, eb)
	}
	many, _ := appendRowsRequest(nil, makeSets(3, 2, 1), false)
	url2, _ := serveScorer(t, NewServer(NewLocal(tiny()), WithMaxRows(5)))
	if st, eb = post(t, url2+PathScore, h, many); st != http.StatusRequestEntityTooLarge || eb.Code != CodeTooLarge {
		t.Errorf("more rows than a server of 5 takes: %d %+v", st, eb)
	}
}

// Request bodies are read into recycled buffers: whatever a buffer held
// before, a body comes back byte for byte, whether it states its length,
// states none (chunked), or outgrows the buffer it was handed.
func TestServerReadBodyReusesBuffers(t *testing.T) {
	s := NewServer(NewLocal(tiny()), WithMaxRequestBytes(1<<20))
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
