package schemas

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

func randTrajectoryBin(r *rand.Rand) Trajectory {
	toks := func() []int32 {
		out := make([]int32, r.IntN(40))
		for i := range out {
			out[i] = r.Int32() - r.Int32()
		}
		if len(out) == 0 && r.IntN(2) == 0 {
			return nil
		}
		return out
	}
	t := Trajectory{TrajectoryID: "t-" + string(rune('a'+r.IntN(26))), PromptID: "p\x00é", GroupSize: r.Int32N(9) - 1,
		SampleIndex: r.Int32(), PolicyVersion: r.Int64() - r.Int64(), CreatedAtMs: r.Int64(), Prompt: toks(),
		GoldTarget: toks(), GoldSpan: [2]int32{r.Int32N(5), r.Int32N(50)}}
	for k := r.IntN(4); k > 0; k-- {
		t.Turns = append(t.Turns, Turn{Kind: KindTool, Action: toks(), Observation: toks()})
	}
	if r.IntN(2) == 0 {
		v := []float64{r.NormFloat64(), math.NaN(), math.Inf(-1)}[r.IntN(3)]
		t.Reward = &v
	}
	if r.IntN(2) == 0 {
		s := "ans"
		t.PredAnswer = &s
	}
	for k := r.IntN(3); k > 0; k-- {
		t.GoldAnswers = append(t.GoldAnswers, "g\xff")
	}
	if r.IntN(3) > 0 {
		t.RolloutLogprobs = make([]float32, r.IntN(20))
		for i := range t.RolloutLogprobs {
			t.RolloutLogprobs[i] = float32(r.NormFloat64())
		}
	}
	if r.IntN(2) == 0 {
		v := float32(r.Float64())
		t.Temperature = &v
	}
	if r.IntN(2) == 0 {
		v := "nq"
		t.Source = &v
	}
	return t
}

func randScoredBin(r *rand.Rand) Scored {
	s := Scored{Trajectory: randTrajectoryBin(r), Method: "attnsr", Direction: "", ScorerModel: "m",
		ScorerPolicyVersion: r.Int64(), Truncations: r.Int32N(3), ScoredAtMs: r.Int64()}
	opt := func() *float64 {
		if r.IntN(2) == 0 {
			return nil
		}
		v := r.NormFloat64()
		return &v
	}
	for k := r.IntN(4); k > 0; k-- {
		s.Turns = append(s.Turns, TurnScore{Delta: opt(), With: opt(), Without: opt()})
	}
	for k := r.IntN(3); k > 0; k-- {
		n := r.IntN(4)
		g := LayerGraph{Layer: r.Int32N(28), K: int32(n)}
		if n > 0 {
			g.AA, g.AO = make([]float64, n*n), make([]float64, n*n)
			for i := range g.AA {
				g.AA[i], g.AO[i] = r.Float64(), r.Float64()
			}
		}
		s.Attention = append(s.Attention, g)
	}
	for k := r.IntN(3); k > 0; k-- {
		n := r.IntN(5)
		g := LowerGraph{Layer: r.Int32N(28), K: int32(n)}
		if m := LowerLen(n); m > 0 {
			g.AA, g.AO = make([]float64, m), make([]float64, m)
			for i := range g.AA {
				g.AA[i], g.AO[i] = r.Float64(), r.Float64()
			}
		}
		s.Graphs = append(s.Graphs, g)
	}
	return s
}

// differential decodes b with the direct and the generic decoder: whenever
// the direct one accepts, the generic one accepts the same record (compared
// by encoding both); when it declines, Decode gives the generic answer.
func differential[T any](t *testing.T, fast, generic *avroCodec[T], b []byte) bool {
	t.Helper()
	want, werr := generic.Decode(b)
	got, gerr := fast.Decode(b)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("direct decoder error %v, generic %v", gerr, werr)
	}
	if werr != nil {
		if werr.Error() != gerr.Error() {
			t.Fatalf("errors differ: %v vs %v", gerr, werr)
		}
		return false
	}
	wb, err1 := generic.Encode(want)
	gb, err2 := generic.Encode(got)
	if err1 != nil || err2 != nil || !bytes.Equal(wb, gb) {
		t.Fatalf("direct and generic decoders disagree (%v, %v)", err1, err2)
	}
	return true
}

func TestBinaryDecodersMatchGoavro(t *testing.T) {
	if !binaryDecodeOK() || defaultScored().decodeBody == nil || defaultTrajectories().decodeBody == nil {
		t.Fatal("the direct decoders are off: update scored_binary.go to the schemas")
	}
	r := rand.New(rand.NewPCG(5, 6))
	fastT, genT := trajectories(nil), trajectories(nil)
	genT.decodeBody = nil
	fastS, genS := scoredRecords(nil), scoredRecords(nil)
	genS.decodeBody = nil
	sharedT, sharedS := trajectories([]CodecOption{WithSharedInput()}), scoredRecords([]CodecOption{WithSharedInput()})
	accepted := 0
	for k := 0; k < 400; k++ {
		tr := randTrajectoryBin(r)
		sc := randScoredBin(r)
		tb, err := fastT.Encode(&tr)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := fastS.Encode(&sc)
		if err != nil {
			t.Fatal(err)
		}
		if !differential(t, fastT, genT, tb) || !differential(t, fastS, genS, sb) ||
			!differential(t, sharedT, genT, tb) || !differential(t, sharedS, genS, sb) {
			t.Fatalf("record %d: a valid record was rejected", k)
		}
		// Mutations: flipped bytes and cuts, which the shape check mostly
		// rejects and sometimes lets through as other valid records.
		for m := 0; m < 20; m++ {
			for _, src := range [][]byte{tb, sb} {
				b := append([]byte(nil), src...)
				switch r.IntN(3) {
				case 0:
					i := headerSize + r.IntN(len(b)-headerSize)
					b[i] ^= byte(1 + r.IntN(255))
				case 1:
					b = b[:headerSize+r.IntN(len(b)-headerSize)]
				default:
					i := headerSize + r.IntN(len(b)-headerSize)
					b[i] = byte(r.IntN(256))
					b = append(b, byte(r.IntN(256)))
				}
				var ok bool
				if &src[0] == &tb[0] {
					ok = differential(t, fastT, genT, b) && differential(t, sharedT, genT, b)
				} else {
					ok = differential(t, fastS, genS, b) && differential(t, sharedS, genS, b)
				}
				if ok {
					accepted++
				}
			}
		}
	}
	t.Logf("%d mutated records were valid and decoded alike", accepted)
}

// benchScoredBytes is a search-QA sized scored record (~1,400 tokens).
func benchScoredBytes(b *testing.B) []byte {
	r := rand.New(rand.NewPCG(1, 1))
	s := randScoredBin(r)
	s.Trajectory.Prompt = make([]int32, 250)
	s.Trajectory.Turns = nil
	for i := 0; i < 3; i++ {
		s.Trajectory.Turns = append(s.Trajectory.Turns, Turn{Kind: KindSearch, Action: make([]int32, 60), Observation: make([]int32, 330)})
	}
	out, err := scoredRecords(nil).Encode(&s)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func BenchmarkScoredDecodeGoavro(b *testing.B) {
	data, c := benchScoredBytes(b), scoredRecords(nil)
	c.decodeBody = nil
	for b.Loop() {
		if _, err := c.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSharedInputViews decodes the same records with and without
// WithSharedInput, at every alignment of their packed arrays (ids of
// growing length shift them): the values are equal, the shared decode's
// token arrays, log-probs and strings lie inside the input where the host
// reads in place (its strings never: they outlive records as group keys),
// and the default decode's share nothing with it.
func TestSharedInputViews(t *testing.T) {
	shared, plain := ScoredRecords(WithSharedInput()), ScoredRecords()
	inside := func(b []byte, p unsafe.Pointer) bool {
		a := uintptr(unsafe.Pointer(&b[0]))
		return uintptr(p) >= a && uintptr(p) < a+uintptr(len(b))
	}
	for shift := 0; shift < 8; shift++ {
		sc := randScoredBin(rand.New(rand.NewPCG(9, uint64(shift))))
		sc.Trajectory.TrajectoryID = strings.Repeat("t", 1+shift)
		sc.Trajectory.Prompt = []int32{1, -2, 1 << 30}
		sc.Trajectory.Turns = []Turn{{Kind: KindSearch, Action: []int32{4, 5}, Observation: []int32{6}}, {Kind: KindAnswer, Action: []int32{7}}}
		sc.Trajectory.RolloutLogprobs = []float32{-0.5, -1.25, -2}
		b, err := plain.Encode(&sc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := shared.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		gb, err1 := plain.Encode(got)
		wb, err2 := plain.Encode(want)
		if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) || !bytes.Equal(gb, b) || !reflect.DeepEqual(got.Trajectory.Prompt, sc.Trajectory.Prompt) {
			t.Fatalf("shift %d: the shared decode differs from the copying one", shift)
		}
		tr := &got.Trajectory
		views := []unsafe.Pointer{unsafe.Pointer(&tr.Prompt[0]), unsafe.Pointer(&tr.Turns[0].Action[0]),
			unsafe.Pointer(&tr.Turns[1].Action[0]), unsafe.Pointer(&tr.RolloutLogprobs[0])}
		for i, p := range views {
			if inside(b, p) != canShare {
				t.Fatalf("shift %d: array %d inside the input: %v, want %v (the host reads in place: %v)", shift, i, inside(b, p), canShare, canShare)
			}
		}
		if inside(b, unsafe.Pointer(unsafe.StringData(tr.TrajectoryID))) {
			t.Fatalf("shift %d: the shared decode's trajectory id is a view of the input", shift)
		}
		wt := &want.Trajectory
		for i, p := range []unsafe.Pointer{unsafe.Pointer(&wt.Prompt[0]), unsafe.Pointer(&wt.RolloutLogprobs[0]), unsafe.Pointer(unsafe.StringData(wt.TrajectoryID))} {
			if inside(b, p) {
				t.Fatalf("shift %d: the default decode's array %d shares the input's memory", shift, i)
			}
		}
	}
}

func BenchmarkScoredDecodeShared(b *testing.B) {
	data, c := benchScoredBytes(b), scoredRecords([]CodecOption{WithSharedInput()})
	for b.Loop() {
		if _, err := c.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScoredDecodeDirect(b *testing.B) {
	data, c := benchScoredBytes(b), scoredRecords(nil)
	for b.Loop() {
		if _, err := c.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// The direct encoders write goavro's bytes for random records.
func TestBinaryEncodersMatchGoavro(t *testing.T) {
	if !scoredBinaryOK() || defaultScored().appendBody == nil || defaultTrajectories().appendBody == nil {
		t.Fatal("the direct encoders are off: update sample_binary.go to the schemas")
	}
	r := rand.New(rand.NewPCG(7, 8))
	ct, cs := compiledTrajectory(), compiledScored()
	for k := 0; k < 400; k++ {
		tr, sc := randTrajectoryBin(r), randScoredBin(r)
		want, err := ct.avro.BinaryFromNative(nil, trajectoryToNative(&tr))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTrajectory(nil, &tr); !bytes.Equal(got, want) {
			t.Fatalf("trajectory %d: direct encoding differs from goavro's", k)
		}
		want, err = cs.avro.BinaryFromNative(nil, scoredToNative(&sc))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendScored(nil, &sc); !bytes.Equal(got, want) {
			t.Fatalf("scored %d: direct encoding differs from goavro's", k)
		}
	}
}

func BenchmarkScoredEncodeGoavro(b *testing.B) {
	c := scoredRecords(nil)
	s, err := c.Decode(benchScoredBytes(b))
	if err != nil {
		b.Fatal(err)
	}
	c.appendBody = nil
	for b.Loop() {
		if _, err := c.Encode(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScoredEncodeDirect(b *testing.B) {
	c := scoredRecords(nil)
	s, err := c.Decode(benchScoredBytes(b))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Encode(s); err != nil {
			b.Fatal(err)
		}
	}
}

// The direct decoder runs before the shape check, so it must refuse what
// the shape check refuses even where the bytes could be read: an int in
// more than five bytes, an array block whose byte size is negative or runs
// past the body, the most negative block count. Each such body decodes (to
// an error) exactly as on the generic path.
func TestDirectDecoderRefusesWhatTheShapeCheckRefuses(t *testing.T) {
	fast, gen := trajectories(nil), trajectories(nil)
	gen.decodeBody = nil
	tr := Trajectory{TrajectoryID: "t", PromptID: "p", GroupSize: 1, Turns: []Turn{{Kind: "answer", Action: []int32{5}}}}
	b, err := fast.Encode(&tr)
	if err != nil {
		t.Fatal(err)
	}
	if !differential(t, fast, gen, b) {
		t.Fatal("the valid record was refused")
	}
	body := b[headerSize:]
	// trajectory_id "t" (2 bytes), prompt_id "p" (2 bytes), then group_size 1 = 0x02.
	if !bytes.Equal(body[:5], []byte{2, 't', 2, 'p', 2}) {
		t.Fatalf("unexpected layout % x", body[:5])
	}
	splice := func(at int, repl ...byte) []byte {
		out := append(append([]byte(nil), b[:headerSize+at]...), repl...)
		return append(out, body[at+1:]...)
	}
	// group_size 1 in six bytes: 0x82 0x80 0x80 0x80 0x80 0x00.
	long := splice(4, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00)
	if differential(t, fast, gen, long) {
		t.Fatal("an int in six bytes decoded")
	}
	// group_size 1 in five bytes is valid Avro.
	if !differential(t, fast, gen, splice(4, 0x82, 0x80, 0x80, 0x80, 0x00)) {
		t.Fatal("an int in five bytes was refused")
	}
	// The turns array (after group_size, sample_index, policy_version,
	// created_at_ms and the empty prompt) as one block of count −1 with a
	// bad byte size.
	i := 5 + 1 + 1 + 1 + 1 // group_size, sample_index 0, policy_version 0, created_at_ms 0, prompt ""
	if body[i] != 2 {      // block count 1
		t.Fatalf("turns block count % x", body[i:i+2])
	}
	for _, size := range [][]byte{{0x03}, {0x7e}} { // −2, then 63 (past the end)
		bad := append(append(append([]byte(nil), b[:headerSize+i]...), 0x01), size...) // count −1
		bad = append(bad, body[i+1:]...)
		if differential(t, fast, gen, bad) {
			t.Fatalf("a block of byte size % x decoded", size)
		}
	}
}

// TestKindsInterned checks that decoding a turn's kind gives the package's
// constant for a known kind (no copy) and a copy of anything else.
func TestKindsInterned(t *testing.T) {
	tr := Trajectory{TrajectoryID: "t", PromptID: "p", GroupSize: 1,
		Turns: []Turn{{Kind: KindSearch}, {Kind: KindTool}, {Kind: KindOther}, {Kind: "custom"}, {Kind: KindAnswer}}}
	b, err := Trajectories().Encode(&tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Trajectories().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{KindSearch, KindTool, KindOther, "custom", KindAnswer} {
		k := got.Turns[i].Kind
		if k != want {
			t.Fatalf("turn %d: kind %q, want %q", i, k, want)
		}
		if interned := unsafe.StringData(k) == unsafe.StringData(want); interned != (want != "custom") {
			t.Fatalf("turn %d (%q): the package's constant: %v", i, k, interned)
		}
	}
}
