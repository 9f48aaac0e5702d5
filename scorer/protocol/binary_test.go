package protocol_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// randomSets: sets of full and compact rows with every optional field
// present and absent, empty arrays included.
func randomSets(r *rand.Rand, n int) []scorer.RowSet {
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
	var sets []scorer.RowSet
	for s := 0; s < n; s++ {
		set := scorer.RowSet{ID: []string{"", "t-1", `q<1>&"x"\é`}[r.IntN(3)]}
		target, span := toks(1+r.IntN(9)), [2]int{r.IntN(3), 3 + r.IntN(9)}
		shared := r.IntN(2) == 0
		if r.IntN(2) == 0 { // compact
			set.Tokens = toks(r.IntN(50))
		}
		for j := 0; j < r.IntN(5); j++ {
			row := scorer.Row{Target: target, Span: span, Temperature: []float64{0, 1, 0.7, 1.0 / 3, 1e-300}[r.IntN(5)]}
			if !shared {
				row.Target, row.Span = toks(r.IntN(6)-1), [2]int{r.IntN(9) - 2, r.IntN(99)}
			}
			if set.Tokens != nil {
				var ps []scorer.Piece
				for k := 0; k < r.IntN(4); k++ {
					if r.IntN(3) == 0 {
						ps = append(ps, scorer.Piece{Literal: toks(r.IntN(3))})
					} else {
						a := r.IntN(len(set.Tokens) + 1)
						ps = append(ps, scorer.Piece{Start: a, End: a + r.IntN(len(set.Tokens)-a+1)})
					}
				}
				if ps == nil {
					ps = []scorer.Piece{}
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
	cases := [][]scorer.RowSet{nil, {}, {{}}, {{ID: "x", Rows: []scorer.Row{{}}}},
		// an empty literal (the smallest piece, 5 bytes) last in the body
		{{Tokens: []int32{1, 2}, Rows: []scorer.Row{{Target: []int32{3}}}, Pieces: [][]scorer.Piece{{{Start: 0, End: 2}, {Literal: []int32{}}}}}},
		{{Tokens: []int32{}, Rows: []scorer.Row{{}}, Pieces: [][]scorer.Piece{{{Literal: []int32{}}}}}},
	}
	for k := 0; k < 200; k++ {
		cases = append(cases, randomSets(r, r.IntN(5)))
	}
	for i, sets := range cases {
		for _, compact := range []bool{false, true} {
			js, err := protocol.AppendScoreRequest(nil, sets, compact)
			if err != nil {
				t.Fatal(err)
			}
			var want protocol.ScoreRequest
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			bin, err := protocol.AppendRowsRequest(nil, sets, compact)
			if err != nil {
				t.Fatal(err)
			}
			got, err := protocol.DecodeRowsRequest(bin, noLimit, noLimit)
			if err != nil {
				t.Fatalf("case %d compact=%v: %v", i, compact, err)
			}
			if want.Sets == nil { // JSON "sets":[] of no sets
				want.Sets = []protocol.WireRowSet{}
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
	sets = append(sets, scorertest.CompactOf(scorertest.MakeSets(1, 1, 1)[0]))
	valid, err := protocol.AppendRowsRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeRowsRequest(valid, noLimit, noLimit); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(valid); n++ {
		if _, err := protocol.DecodeRowsRequest(valid[:n], noLimit, noLimit); err == nil {
			t.Fatalf("a body cut to %d of %d bytes decoded", n, len(valid))
		}
	}
	bad := map[string][]byte{
		"trailing byte":    append(append([]byte{}, valid...), 0),
		"magic":            append([]byte("CFR2"), valid[4:]...),
		"huge set count":   append([]byte(protocol.MagicRows), 0xff, 0xff, 0xff, 0x7f),
		"unknown set flag": {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0},
		"unknown row flag": {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 64},
		"piece kind":       {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0},
		"huge ids":         {'C', 'F', 'R', '1', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		"id not UTF-8":     {'C', 'F', 'R', '1', 1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0, 0, 0, 0, 0},
	}
	for name, b := range bad {
		if req, err := protocol.DecodeRowsRequest(b, noLimit, noLimit); err == nil {
			t.Errorf("%s: decoded to %+v", name, req)
		}
	}
}

// The scorer's limits apply while a binary request is read: too many sets,
// rows or pieces is a CodeTooLarge rejection, whatever the body's size.
func TestRowsRequestLimits(t *testing.T) {
	sets := []scorer.RowSet{scorertest.CompactOf(scorertest.MakeSets(1, 3, 2)[0]), scorertest.CompactOf(scorertest.MakeSets(1, 3, 2)[0])}
	b, err := protocol.AppendRowsRequest(nil, sets, true)
	if err != nil {
		t.Fatal(err)
	}
	req, err := protocol.DecodeRowsRequest(b, noLimit, noLimit)
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
	if _, err := protocol.DecodeRowsRequest(b, rows, pieces); err != nil {
		t.Errorf("at its limits exactly: %v", err)
	}
	empty, err := protocol.AppendRowsRequest(nil, []scorer.RowSet{{}, {}, {}}, true) // three sets of no rows
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		body      []byte
		rows, pcs int
	}{"rows": {b, rows - 1, pieces}, "pieces": {b, rows, pieces - 1}, "sets": {empty, 2, noLimit}} {
		_, err := protocol.DecodeRowsRequest(c.body, c.rows, c.pcs)
		var rej *scorer.RejectedError
		if !errors.As(err, &rej) || rej.Code != scorer.CodeTooLarge {
			t.Errorf("one over the %s limit: %v; want a %s rejection", name, err, scorer.CodeTooLarge)
		}
	}
	if _, err := protocol.DecodeRowsRequest(empty, 3, noLimit); err != nil {
		t.Errorf("three empty sets at a limit of 3: %v", err)
	}
	// A million one-byte rows are refused before a hundred bytes each are allocated.
	huge := append([]byte(protocol.MagicRows), 1, 0, 0, 0, 0, 0, 0, 0, 0)
	huge = binary.LittleEndian.AppendUint32(huge, 1<<20)
	huge = append(huge, make([]byte, 1<<20)...)
	var rej *scorer.RejectedError
	if _, err := protocol.DecodeRowsRequest(huge, 65536, noLimit); !errors.As(err, &rej) || rej.Code != scorer.CodeTooLarge {
		t.Errorf("2^20 empty rows: %v", err)
	}
	if _, err := protocol.DecodeRowsRequest(huge, noLimit, noLimit); err != nil {
		t.Errorf("2^20 empty rows without a limit: %v", err)
	}
}

func FuzzDecodeRowsRequest(f *testing.F) {
	for _, sets := range [][]scorer.RowSet{scorertest.MakeSets(2, 2, 2), {scorertest.CompactOf(scorertest.MakeSets(3, 1, 1)[0])}} {
		b, _ := protocol.AppendRowsRequest(nil, sets, true)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := protocol.DecodeRowsRequest(b, 4096, 4096)
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
		var back protocol.ScoreRequest
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if back.Sets == nil {
			back.Sets = []protocol.WireRowSet{}
		}
		if !reflect.DeepEqual(back, req) { // reflect compares floats by ==: -0 and 0 alike
			t.Fatalf("JSON changed the request:\n got %+v\nwant %+v", back, req)
		}
	})
}

// A graphs body decodes only when it is exactly the encoding of what it
// decodes to; no length in it can panic or allocate past the body.
func FuzzDecodeGraphs(f *testing.F) {
	b, _ := protocol.AppendGraphs(nil, protocol.AttentionResponse{Results: []protocol.WireJobResult{{Graphs: []protocol.WireGraph{{Layer: 1, AA: [][]float64{{1}}, AO: [][]float64{{2}}}}}}})
	f.Add(b)
	for _, k := range []uint32{1 << 30, 1 << 31, 3 << 30, 1<<32 - 1, 1 << 16} {
		f.Add(binary.LittleEndian.AppendUint32(append([]byte(protocol.MagicGraphs), 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0), k))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := protocol.DecodeGraphs(b)
		if err != nil {
			return
		}
		again, err := protocol.AppendGraphs(nil, resp)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decoded %x to %+v, which encodes to %x (%v)", b, resp, again, err)
		}
	})
}

// A graph whose sides overflow 64 bits when multiplied is an error, not a panic.
func TestDecodeGraphsHugeSides(t *testing.T) {
	for _, k := range []uint32{1 << 30, 1 << 31, 3 << 30, 1<<32 - 1} {
		b := binary.LittleEndian.AppendUint32(append([]byte(protocol.MagicGraphs), 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0), k)
		if resp, err := protocol.DecodeGraphs(b); err == nil {
			t.Errorf("K = %d decoded to %+v", k, resp)
		}
	}
}

// The binary answer holds only square graphs: another shape is an error,
// not reshaped.
func TestAppendGraphsRejectsOtherShapes(t *testing.T) {
	sq := [][]float64{{1, 2}, {3, 4}}
	for name, g := range map[string]protocol.WireGraph{
		"jagged AO":       {AA: sq, AO: [][]float64{{1}, {2, 3, 4}}},
		"AO of other K":   {AA: sq, AO: [][]float64{{1}}},
		"AA not square":   {AA: [][]float64{{1, 2, 3}, {4}}, AO: sq},
		"AO with no rows": {AA: sq},
	} {
		if _, err := protocol.AppendGraphs(nil, protocol.AttentionResponse{Results: []protocol.WireJobResult{{Graphs: []protocol.WireGraph{g}}}}); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	if _, err := protocol.AppendGraphs(nil, protocol.AttentionResponse{Results: []protocol.WireJobResult{{Graphs: []protocol.WireGraph{{AA: sq, AO: sq}}}}}); err != nil {
		t.Error(err)
	}
}

// The binary graphs body carries every float64 bit for bit.
func TestGraphsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	v := int64(-3)
	for _, pv := range []*int64{nil, &v} {
		resp := protocol.AttentionResponse{PolicyVersion: pv}
		for j := 0; j < 3; j++ {
			var res protocol.WireJobResult
			for l := 0; l < j+1; l++ {
				k := r.IntN(6)
				g := protocol.WireGraph{Layer: l*7 - 1, AA: make([][]float64, k), AO: make([][]float64, k)}
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
		b, err := protocol.AppendGraphs(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := protocol.DecodeGraphs(b)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%#v", bitsOf(got)) != fmt.Sprintf("%#v", bitsOf(resp)) ||
			(got.PolicyVersion == nil) != (pv == nil) || (pv != nil && *got.PolicyVersion != *pv) {
			t.Fatalf("round trip changed the answer:\n got %+v\nwant %+v", got, resp)
		}
		for n := 0; n < len(b); n++ {
			if _, err := protocol.DecodeGraphs(b[:n]); err == nil {
				t.Fatalf("a graphs body cut to %d of %d bytes decoded", n, len(b))
			}
		}
	}
}

// bitsOf lists an answer's layers, sizes and float64 bits (-0 differs from 0).
func bitsOf(resp protocol.AttentionResponse) []uint64 {
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
