package protocol_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// The hand-written score request is byte for byte what encoding/json writes.
func TestAppendScoreRequestMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	toks := func(n int) []int32 {
		if n < 0 {
			return nil
		}
		out := make([]int32, n)
		for i := range out {
			out[i] = r.Int32() - r.Int32() // negatives too
		}
		return out
	}
	cases := [][]scorer.RowSet{nil, {}, {{ID: "", Rows: nil}}, {{ID: `q<1>&"x"\é`, Rows: []scorer.Row{{}}}}}
	for k := 0; k < 50; k++ {
		var sets []scorer.RowSet
		for s := 0; s < r.IntN(4); s++ {
			set := scorer.RowSet{ID: "t-" + string(rune('a'+r.IntN(26)))}
			for j := 0; j < r.IntN(5); j++ {
				// Lengths around the encoder's chunk size and its remainders mod 3.
				n := []int{-1, 0, 1, 2, 3, 767, 768, 769, 1536, 2000 + r.IntN(5)}[r.IntN(10)]
				row := scorer.Row{Context: toks(n), Target: toks(r.IntN(40) - 1), Span: [2]int{r.IntN(9), r.IntN(99)}}
				row.Temperature = []float64{0, 0, 1, 0.7, 1e-7, 1e21, 1.0 / 3}[r.IntN(7)]
				set.Rows = append(set.Rows, row)
			}
			sets = append(sets, set)
		}
		cases = append(cases, sets)
	}
	for i, sets := range cases {
		want, err := json.Marshal(protocol.SetsToWire(sets))
		if err != nil {
			t.Fatal(err)
		}
		got, err := protocol.AppendScoreRequest(nil, sets, false)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: got\n%.300s\nwant\n%.300s", i, got, want)
		}
	}
}

// benchSets is a search-QA shaped request: 8 trajectories of 4 rows that
// repeat a ~1,300-token prefix.
func benchSets() []scorer.RowSet {
	ctx := make([]int32, 1300)
	for i := range ctx {
		ctx[i] = int32(i % 251)
	}
	var sets []scorer.RowSet
	for s := 0; s < 8; s++ {
		set := scorer.RowSet{ID: "q000001-1"}
		for j := 0; j < 4; j++ {
			set.Rows = append(set.Rows, scorer.Row{Context: ctx[:1000+100*j], Target: ctx[:60], Span: [2]int{40, 52}})
		}
		sets = append(sets, set)
	}
	return sets
}

func BenchmarkScoreRequestEncodingJSON(b *testing.B) {
	sets := benchSets()
	for b.Loop() {
		if _, err := json.Marshal(protocol.SetsToWire(sets)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScoreRequestAppend(b *testing.B) {
	sets := benchSets()
	for b.Loop() {
		if _, err := protocol.AppendScoreRequest(make([]byte, 0, 64+6*40000), sets, false); err != nil {
			b.Fatal(err)
		}
	}
}

// Score reads every JSON number as encoding/json reads it into a float64.
func TestScoreUnmarshalMatchesFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	nums := []string{"0", "-0", "1e400", "-1e400", "4.9e-324", "2e-324", "1.7976931348623157e308", "123456789012345678901234567890", "0.1", "1E5", "-2.5e-3"}
	for i := 0; i < 2000; i++ {
		f := r.NormFloat64() * float64(r.Int64N(1<<40))
		nums = append(nums, strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', r.IntN(25), 64), strconv.FormatFloat(f, 'f', r.IntN(20), 64))
	}
	for _, n := range nums {
		var want float64
		werr := json.Unmarshal([]byte(n), &want)
		var got []protocol.Score
		gerr := json.Unmarshal([]byte("["+n+"]"), &got)
		if (werr == nil) != (gerr == nil) || (werr == nil && math.Float64bits(float64(got[0])) != math.Float64bits(want)) {
			t.Fatalf("%s: Score %v (%v), float64 %v (%v)", n, got, gerr, want, werr)
		}
	}
}

func TestAppendAttentionRequestMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := [][]scorer.AttentionJob{nil, {}, {{}}, {{ID: `q<1>&"x"\é`, Steps: []scorer.Step{}, Layers: []int{}}}}
	for k := 0; k < 60; k++ {
		var jobs []scorer.AttentionJob
		for j := 0; j < r.IntN(4); j++ {
			n := []int{0, 1, 2, 3, 767, 768, 769, 1536, 2000 + r.IntN(5)}[r.IntN(9)]
			job := scorer.AttentionJob{ID: []string{"", "t-" + string(rune('a'+r.IntN(26)))}[r.IntN(2)], Tokens: make([]int32, n)}
			for i := range job.Tokens {
				job.Tokens[i] = r.Int32() - r.Int32()
			}
			for s := 0; s < r.IntN(5); s++ {
				a := r.IntN(100)
				job.Steps = append(job.Steps, scorer.Step{Action: [2]int{a, a + r.IntN(9)}, Observation: [2]int{a + 9, a + 9 + r.IntN(3) - 1}})
			}
			for l := 0; l < r.IntN(4); l++ {
				job.Layers = append(job.Layers, r.IntN(40))
			}
			jobs = append(jobs, job)
		}
		cases = append(cases, jobs)
	}
	for i, jobs := range cases {
		want, err := json.Marshal(protocol.JobsToWire(jobs))
		if err != nil {
			t.Fatal(err)
		}
		got, err := protocol.AppendAttentionRequest(nil, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
