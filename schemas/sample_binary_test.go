package schemas

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

func TestSampleBinaryProbeAgrees(t *testing.T) {
	if !sampleBinaryAgrees(compiledSample()) {
		t.Fatal("appendSample disagrees with goavro on the probe sample: update it to sample.avsc")
	}
	if defaultSamples().appendBody == nil {
		t.Fatal("the Samples codec does not use the direct encoder")
	}
}

// The direct encoder writes goavro's bytes for random samples, NaN and
// infinities included, and they decode to the same sample.
func TestSampleBinaryMatchesGoavro(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	f64 := func() *float64 {
		if r.IntN(3) == 0 {
			return nil
		}
		v := []float64{r.NormFloat64(), 0, math.Inf(1), math.NaN(), -1e300}[r.IntN(5)]
		return &v
	}
	f32s := func(n int) []float32 {
		if r.IntN(3) == 0 {
			return nil
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(r.NormFloat64())
		}
		return out
	}
	c := compiledSample()
	for k := 0; k < 300; k++ {
		n := r.IntN(200)
		s := &Sample{TrajectoryID: "tr-é\x00" + string(rune('a'+k%26)), PromptID: "p", GroupSize: r.Int32N(9), SampleIndex: r.Int32() - r.Int32(),
			PolicyVersion: r.Int64() - r.Int64(), CreatedAtMs: r.Int64(), Method: "attnsr", Output: "token_rewards",
			Partial: r.IntN(2) == 0, Reward: r.NormFloat64(), OutcomeAdvantage: *fNonNil(f64()),
			Tokens: make([]int32, n), LossMask: make([]uint8, n), Advantages: f32s(n), TokenRewards: f32s(n), RolloutLogprobs: f32s(n)}
		for i := range s.Tokens {
			s.Tokens[i] = r.Int32() - r.Int32()
			s.LossMask[i] = uint8(r.IntN(2))
		}
		if r.IntN(2) == 0 {
			v := float32(r.Float64())
			s.Temperature = &v
		}
		for j := r.IntN(5); j > 0; j-- {
			s.Turns = append(s.Turns, TurnDiag{Kind: KindTool, Eligible: r.IntN(2) == 0, Delta: f64(), Z: f64(), ZNorm: f64(),
				Gate: r.Int32N(2), ProcessAdvantage: r.NormFloat64(), Advantage: r.NormFloat64(), P: f64(), StepReward: f64(), Weight: f64()})
		}
		if r.IntN(2) == 0 {
			v, src := r.Int64()-r.Int64(), "src\xff"
			s.ScorerPolicyVersion, s.Source = &v, &src
		}
		if r.IntN(2) == 0 {
			s.AttnSR = &AttnSRDiag{Confidence: r.Float64(), Focus: r.Float64(), Consensus: math.NaN(), Baseline: r.NormFloat64(), Budget: 2}
		}
		want, err := c.avro.BinaryFromNative(nil, sampleToNative(s))
		if err != nil {
			t.Fatal(err)
		}
		got := appendSample(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("sample %d: direct encoding differs from goavro's (%d vs %d bytes)", k, len(got), len(want))
		}
		framed, err := Samples().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Samples().Decode(framed)
		if err != nil {
			t.Fatalf("sample %d: decode: %v", k, err)
		}
		again, err := Samples().Encode(back)
		if err != nil || !bytes.Equal(again, framed) {
			t.Fatalf("sample %d: decode and encode again changed the bytes (%v)", k, err)
		}
	}
}

func fNonNil(v *float64) *float64 {
	if v == nil {
		z := 0.0
		return &z
	}
	return v
}

// benchSample is a search-QA sample of 1,400 tokens with four turns.
func benchSample() *Sample {
	n := 1400
	s := &Sample{TrajectoryID: "q000001-1", PromptID: "q000001", GroupSize: 5, Method: "lapo", Output: "advantages",
		Tokens: make([]int32, n), LossMask: make([]uint8, n), Advantages: make([]float32, n), RolloutLogprobs: make([]float32, n)}
	d := 0.5
	for i := 0; i < 4; i++ {
		s.Turns = append(s.Turns, TurnDiag{Kind: KindSearch, Eligible: true, Delta: &d, Z: &d, ZNorm: &d})
	}
	return s
}

func BenchmarkSampleEncodeGoavro(b *testing.B) {
	s, c := benchSample(), compiledSample()
	for b.Loop() {
		if _, err := c.avro.BinaryFromNative(make([]byte, 0, sampleSize(s)), sampleToNative(s)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSampleEncodeDirect(b *testing.B) {
	s := benchSample()
	for b.Loop() {
		appendSample(make([]byte, 0, sampleSize(s)), s)
	}
}
