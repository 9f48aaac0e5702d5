package schemas

import (
	"encoding/hex"
	"math"
	"os"
	"reflect"
	"strings"
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
	raw, err := os.ReadFile("testdata/v2/scored_attnsr_groups.hex")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(raw))
	if len(lines) < 10 {
		t.Fatalf("%d golden records", len(lines))
	}
	for _, l := range lines {
		old, err := hex.DecodeString(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(old[2:10]); got != laterPins[NameScored][0] {
			t.Fatalf("fingerprint %s, want %s", got, laterPins[NameScored][0])
		}
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
