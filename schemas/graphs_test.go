package schemas

import (
	"encoding/hex"
	"math"
	"reflect"
	"testing"
)

// compactScored is sampleScored as an AttnSR record with compact graphs.
func compactScored() *Scored {
	s := sampleScored()
	s.Method, s.Direction, s.Turns = MethodAttnSR, "", nil
	s.Graphs = s.StepGraphs()
	s.Attention = nil
	return s
}

func TestLowerGraph(t *testing.T) {
	k := 4
	g := LayerGraph{Layer: 3, K: int32(k), AA: make([]float64, k*k), AO: make([]float64, k*k)}
	for i := range g.AA {
		g.AA[i], g.AO[i] = float64(i), -float64(i)
	}
	l := g.Lower()
	if LowerLen(k) != 6 || len(l.AA) != 6 || len(l.AO) != 6 || l.Layer != 3 || l.K != 4 {
		t.Fatalf("%+v", l)
	}
	for j := 1; j < k; j++ {
		for c := 0; c < j; c++ {
			if l.AA[LowerIndex(j, c)] != g.AA[j*k+c] || l.AO[LowerIndex(j, c)] != g.AO[j*k+c] {
				t.Fatalf("entry [%d,%d]: %v %v, want %v %v", j, c, l.AA[LowerIndex(j, c)], l.AO[LowerIndex(j, c)], g.AA[j*k+c], g.AO[j*k+c])
			}
		}
	}
	s := &Scored{Attention: []LayerGraph{g}}
	if got := s.StepGraphs(); !reflect.DeepEqual(got, []LowerGraph{l}) {
		t.Fatalf("StepGraphs of a K×K record: %+v", got)
	}
	s.Graphs, s.Attention = []LowerGraph{l}, nil
	if got := s.StepGraphs(); &got[0] != &s.Graphs[0] {
		t.Fatal("StepGraphs of a compact record is not its Graphs")
	}
}

func TestCompactGraphsRoundTrip(t *testing.T) {
	s := compactScored()
	if err := ValidateScored(s, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	b, err := ScoredRecords().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ScoredRecords().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded %+v\nwant %+v", got, s)
	}
	// The direct encoder writes what goavro writes.
	g, err := compiledScored().avro.BinaryFromNative(nil, scoredToNative(s))
	if err != nil || hex.EncodeToString(g) != hex.EncodeToString(b[10:]) {
		t.Fatalf("goavro writes %x (%v), the codec %x", g, err, b[10:])
	}
}

func TestValidateCompactGraphs(t *testing.T) {
	lim := DefaultLimits()
	cases := []struct {
		name   string
		mutate func(*Scored)
	}{
		{"K mismatch", func(s *Scored) { s.Graphs[0].K = 3 }},
		{"AA wrong size", func(s *Scored) { s.Graphs[1].AA = append(s.Graphs[1].AA, 0) }},
		{"AO empty", func(s *Scored) { s.Graphs[1].AO = nil }},
		{"AO NaN", func(s *Scored) { s.Graphs[0].AO[0] = math.NaN() }},
		{"AA above 1", func(s *Scored) { s.Graphs[0].AA[0] = 1.5 }},
		{"AA negative", func(s *Scored) { s.Graphs[0].AA[0] = -0.1 }},
		{"duplicate layer", func(s *Scored) { s.Graphs[1].Layer = s.Graphs[0].Layer }},
		{"negative layer", func(s *Scored) { s.Graphs[0].Layer = -1 }},
		{"both forms", func(s *Scored) { s.Attention = sampleScored().Attention }},
		{"no graphs", func(s *Scored) { s.Graphs = nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := compactScored()
			c.mutate(s)
			if r := ReasonOf(ValidateScored(s, lim)); r != ReasonInvalid {
				t.Fatalf("reason %q, want invalid", r)
			}
		})
	}
}

// TestGoldenV2Decodes: AttnSR records of the second generation (K×K graphs
// in attention, schemas/v2/scored.avsc) decode with today's codec, graphs
// in Attention and none in Graphs, and re-encode with the current schema
// as the same bytes plus one empty array (a 00 byte).
func TestGoldenV2Decodes(t *testing.T) {
	for _, old := range goldenScored(t, "v2", laterPins[NameScored][0]) {
		s, err := ScoredRecords().Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Attention) == 0 || s.Graphs != nil {
			t.Fatalf("%d K×K graphs, %d compact", len(s.Attention), len(s.Graphs))
		}
		if err := ValidateScored(s, DefaultLimits()); err != nil {
			t.Fatal(err)
		}
		b, err := ScoredRecords().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != len(old)+1 || string(b[10:len(b)-1]) != string(old[10:]) || b[len(b)-1] != 0 {
			t.Fatalf("re-encoded %d bytes from %d", len(b), len(old))
		}
		if SchemaOf(old) != NameScored {
			t.Fatalf("SchemaOf: %q", SchemaOf(old))
		}
	}
}

// TestGoldenV3Decodes: AttnSR records of the third generation (compact
// graphs of G_AA and G_AO, schemas/v3/scored.avsc, written by the code of
// that generation) decode with today's codec into the pair form, validate,
// and re-encode with the current schema as the same values with one more
// byte per graph (its empty sum).
func TestGoldenV3Decodes(t *testing.T) {
	for _, old := range goldenScored(t, "v3", laterPins[NameScored][1]) {
		s, err := ScoredRecords().Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Attention) != 0 || len(s.Graphs) == 0 {
			t.Fatalf("%d K×K graphs, %d compact", len(s.Attention), len(s.Graphs))
		}
		for _, g := range s.Graphs {
			if g.Summed() || len(g.AA) != LowerLen(int(g.K)) || len(g.AO) != LowerLen(int(g.K)) {
				t.Fatalf("layer %d: %d AA, %d AO, %d sums for K = %d", g.Layer, len(g.AA), len(g.AO), len(g.Sum), g.K)
			}
		}
		if err := ValidateScored(s, DefaultLimits()); err != nil {
			t.Fatal(err)
		}
		b, err := ScoredRecords().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != len(old)+len(s.Graphs) {
			t.Fatalf("re-encoded %d bytes from %d with %d graphs", len(b), len(old), len(s.Graphs))
		}
		again, err := ScoredRecords().Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatal("re-encoded record decodes differently")
		}
	}
}

// TestSumForm: a graph takes the sum form exactly when every entry pair is
// a mass in [0, 1] whose halves add up to the half of their sum, bit for
// bit; the sum form round-trips through both codecs and validates, and
// mixtures of the two forms are refused.
func TestSumForm(t *testing.T) {
	pair := func(aa, ao []float64) LowerGraph { return LowerGraph{Layer: 2, K: 3, AA: aa, AO: ao} }
	x, y := 0.1, 0.2 // a sum that rounds (not Go's exact constant arithmetic)
	g := SumForm(pair([]float64{0.25, 0.125, x}, []float64{0.5, 0, y}))
	if !g.Summed() || len(g.AA) != 0 || len(g.AO) != 0 || !reflect.DeepEqual(g.Sum, []float64{0.75, 0.125, x + y}) {
		t.Fatalf("sum form: %+v", g)
	}
	// Halving two odd subnormals rounds each (3 units → 2, twice: 4), halving
	// their sum does not (6 → 3): the pair stays.
	if g := SumForm(pair([]float64{0.25, math.SmallestNonzeroFloat64 * 3, 0.1}, []float64{0.5, math.SmallestNonzeroFloat64 * 3, 0.2})); g.Summed() {
		t.Errorf("subnormal: took the sum form: %+v", g)
	}
	for name, aa := range map[string][]float64{
		"negative":  {0.25, -1e-9, 0.1},
		"above one": {0.25, 1.00001, 0.1},
		"NaN":       {0.25, math.NaN(), 0.1},
	} {
		if g := SumForm(pair(aa, []float64{0.5, 0, 0.2})); g.Summed() {
			t.Errorf("%s: took the sum form: %+v", name, g)
		}
	}
	if g := SumForm(pair([]float64{0.25}, []float64{0.5, 0, 0.2})); g.Summed() {
		t.Error("a mis-shaped graph took the sum form")
	}
	s := compactScored()
	for i := range s.Graphs {
		s.Graphs[i] = SumForm(s.Graphs[i])
		if !s.Graphs[i].Summed() {
			t.Fatalf("layer %d did not take the sum form", s.Graphs[i].Layer)
		}
	}
	if err := ValidateScored(s, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	b, err := ScoredRecords().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ScoredRecords().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Graphs, s.Graphs) {
		t.Fatalf("round trip: %+v, want %+v", got.Graphs, s.Graphs)
	}
	gen := scoredRecords(nil) // goavro's encoder and decoder
	gen.decodeBody, gen.appendBody = nil, nil
	if bg, err := gen.Encode(s); err != nil || string(bg) != string(b) {
		t.Fatalf("goavro encodes the sum form differently (%v)", err)
	}
	n, err := gen.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(n.Graphs, s.Graphs) {
		t.Fatalf("goavro decode: %+v, want %+v", n.Graphs, s.Graphs)
	}
	for name, mutate := range map[string]func(g *LowerGraph){
		"sum and aa":    func(g *LowerGraph) { g.AA = append([]float64(nil), g.Sum...) },
		"short sum":     func(g *LowerGraph) { g.Sum = g.Sum[1:] },
		"sum above two": func(g *LowerGraph) { g.Sum[0] = 2.5 },
		"negative sum":  func(g *LowerGraph) { g.Sum[0] = -0.01 },
		"infinite sum":  func(g *LowerGraph) { g.Sum[0] = math.Inf(1) },
	} {
		c := compactScored()
		c.Graphs[0] = SumForm(c.Graphs[0])
		c.Graphs[0].Sum = append([]float64(nil), c.Graphs[0].Sum...)
		mutate(&c.Graphs[0])
		if r := ReasonOf(ValidateScored(c, DefaultLimits())); r != ReasonInvalid {
			t.Errorf("%s: reason %q, want invalid", name, r)
		}
	}
}

// goldenScored reads the golden AttnSR scored records of generation gen
// and checks that there are enough of them and that each names the
// writer schema fingerprint fp.
func goldenScored(t *testing.T, gen, fp string) [][]byte {
	t.Helper()
	recs := goldenGen(t, gen, "scored_attnsr_groups")
	if len(recs) < 10 {
		t.Fatalf("%d golden records", len(recs))
	}
	for _, b := range recs {
		if got := hex.EncodeToString(b[2:10]); got != fp {
			t.Fatalf("fingerprint %s, want %s", got, fp)
		}
	}
	return recs
}
