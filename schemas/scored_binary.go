package schemas

import (
	"bytes"
	"reflect"
	"slices"
	"sync"

	"github.com/creditflow/creditflow/schemas/internal/avrobin"
)

// binReader reads the Avro binary bodies of trajectories and scored records
// (trajectory.avsc, scored.avsc) straight into the Go types, without goavro's
// generic maps, the costly part of decoding them. Decode tries it first, so
// it makes every structural check the shape check makes (an int in at most
// five bytes and 32 bits, lengths and block sizes within the body, union
// indexes, no trailing bytes: avrobin.Reader's checks); whatever it does not
// expect (bad packed lengths included) makes the reader fail and Decode
// takes the shape check and the generic path, which give the error.
// binaryDecodeOK checks it against goavro; TestBinaryDecodersMatchGoavro on
// valid and mutated bodies.
type binReader struct {
	avrobin.Reader
	shared bool // packed int32/float32 arrays may be views of the body (WithSharedInput)
}

// kind is Str for a turn's kind: the known kinds are the package's
// constants, without an allocation each (an agent trajectory has dozens of
// turns); any other string is copied as Str does (ids and kinds outlive
// their records, as group keys and the ledger's ids, so strings are never
// views of the body, shared or not).
func (r *binReader) kind() string {
	b := r.Raw()
	switch string(b) { // compared in place
	case KindSearch:
		return KindSearch
	case KindAnswer:
		return KindAnswer
	case KindTool:
		return KindTool
	case KindOther:
		return KindOther
	}
	return string(b)
}

// packedInt32s reads a required packed int32 array; empty gives nil.
func packedInt32s(r *binReader) []int32 {
	b := r.Raw()
	if len(b)%4 != 0 {
		r.Fail()
	}
	if len(b) == 0 || !r.OK() {
		return nil
	}
	return packedOf[int32](r, b)
}

func (r *binReader) trajectory(t *Trajectory) {
	t.TrajectoryID = r.Str()
	t.PromptID = r.Str()
	t.GroupSize = r.Int()
	t.SampleIndex = r.Int()
	t.PolicyVersion = r.Long()
	t.CreatedAtMs = r.Long()
	t.Prompt = packedInt32s(r)
	r.ArrayReserve(func(n int) { t.Turns = slices.Grow(t.Turns, n) }, func() {
		t.Turns = append(t.Turns, Turn{Kind: r.kind(), Action: packedInt32s(r), Observation: packedInt32s(r)})
	})
	t.Reward = r.OptDouble()
	if r.Branch() {
		s := r.Str()
		t.PredAnswer = &s
	}
	r.Array(func() { t.GoldAnswers = append(t.GoldAnswers, r.Str()) })
	t.GoldTarget = packedInt32s(r)
	t.GoldSpan = [2]int32{r.Int(), r.Int()}
	if r.Branch() {
		b := r.Raw()
		if len(b)%4 != 0 {
			r.Fail()
		} else {
			t.RolloutLogprobs = packedOf[float32](r, b)
		}
	}
	if r.Branch() {
		v := r.Float()
		t.Temperature = &v
	}
	if r.Branch() {
		v := r.Str()
		t.Source = &v
	}
}

// packedOf is b's packed elements: a view of b when r is shared (and b not
// empty), a copy otherwise.
func packedOf[E int32 | float32](r *binReader, b []byte) []E {
	if r.shared && len(b) > 0 {
		return avrobin.View[E](b)
	}
	return avrobin.Unpack[E](b)
}

func decodeTrajectoryBinary(body []byte, shared bool) (*Trajectory, bool) {
	r := &binReader{Reader: avrobin.NewReader(body), shared: shared}
	t := &Trajectory{}
	r.trajectory(t)
	return t, r.Done()
}

func decodeScoredBinary(body []byte, shared bool) (*Scored, bool) {
	r := &binReader{Reader: avrobin.NewReader(body), shared: shared}
	s := &Scored{}
	r.trajectory(&s.Trajectory)
	s.Method = r.Str()
	s.Direction = r.Str()
	var vals []float64 // the turns' optional doubles, one allocation per block
	r.ArrayReserve(func(n int) {
		s.Turns = slices.Grow(s.Turns, n)
		vals = make([]float64, 0, 3*n)
	}, func() {
		s.Turns = append(s.Turns, TurnScore{Delta: r.SlabDouble(&vals), With: r.SlabDouble(&vals), Without: r.SlabDouble(&vals)})
	})
	r.Array(func() {
		g := LayerGraph{Layer: r.Int(), K: r.Int()}
		for _, dst := range []*[]float64{&g.AA, &g.AO} {
			b := r.Raw()
			if len(b)%8 != 0 {
				r.Fail()
			} else if len(b) > 0 {
				*dst = avrobin.Unpack[float64](b)
			}
		}
		s.Attention = append(s.Attention, g)
	})
	s.ScorerModel = r.Str()
	s.ScorerPolicyVersion = r.Long()
	s.Truncations = r.Int()
	s.ScoredAtMs = r.Long()
	s.Graphs = r.lowerGraphs()
	return s, r.Done()
}

// binaryDecodeOK reports whether the direct decoders read a probe trajectory
// and scored record that set every field as the generic path does (so a
// schema change they do not know turns them off).
var binaryDecodeOK = sync.OnceValue(func() bool {
	t, sc, ok := binaryProbes()
	if !ok {
		return false
	}
	tb, err1 := compiledTrajectory().avro.BinaryFromNative(nil, trajectoryToNative(&t))
	sb, err2 := compiledScored().avro.BinaryFromNative(nil, scoredToNative(&sc))
	if err1 != nil || err2 != nil {
		return false
	}
	for _, shared := range []bool{false, canShare} {
		gt, ok1 := decodeTrajectoryBinary(tb, shared)
		gs, ok2 := decodeScoredBinary(sb, shared)
		if !ok1 || !ok2 || !reflect.DeepEqual(*gt, t) || !reflect.DeepEqual(*gs, sc) {
			return false
		}
	}
	return true
})

// scoredBinaryOK reports whether appendTrajectory and appendScored write
// what goavro writes for the probe records.
var scoredBinaryOK = sync.OnceValue(func() bool {
	t, sc, ok := binaryProbes()
	if !ok {
		return false
	}
	tb, err1 := compiledTrajectory().avro.BinaryFromNative(nil, trajectoryToNative(&t))
	sb, err2 := compiledScored().avro.BinaryFromNative(nil, scoredToNative(&sc))
	return err1 == nil && err2 == nil && bytes.Equal(appendTrajectory(nil, &t), tb) && bytes.Equal(appendScored(nil, &sc), sb)
})

// binaryProbes are a trajectory and a scored record that set every field.
func binaryProbes() (Trajectory, Scored, bool) {
	ct, cs := compiledTrajectory(), compiledScored()
	if ct.err != nil || cs.err != nil {
		return Trajectory{}, Scored{}, false
	}
	r, f, ans := 1.0, float32(0.7), "lisbon"
	t := Trajectory{TrajectoryID: "t", PromptID: "p", GroupSize: 5, SampleIndex: 2, PolicyVersion: -1, CreatedAtMs: 1 << 41,
		Prompt: []int32{1, 2}, Turns: []Turn{{Kind: KindSearch, Action: []int32{3}, Observation: []int32{4, 5}}, {Kind: KindAnswer, Action: []int32{6}}},
		Reward: &r, PredAnswer: &ans, GoldAnswers: []string{"a", "b"}, GoldTarget: []int32{7, 8}, GoldSpan: [2]int32{0, 1},
		RolloutLogprobs: []float32{-0.5, -1}, Temperature: &f, Source: &ans}
	sc := Scored{Trajectory: t, Method: MethodLAPO, Direction: DirectionBackward, Turns: []TurnScore{{Delta: &r, With: &r}},
		Attention: []LayerGraph{{Layer: 3, K: 1, AA: []float64{0.5}, AO: []float64{0.25}}}, ScorerModel: "m",
		ScorerPolicyVersion: 4, Truncations: 1, ScoredAtMs: 9,
		Graphs: []LowerGraph{{Layer: 5, K: 2, AA: []float64{0.125}, AO: []float64{0.375}}, {Layer: 6, K: 2, Sum: []float64{0.5}}}}
	return t, sc, true
}
