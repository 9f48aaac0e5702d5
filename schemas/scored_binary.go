package schemas

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"sync"
)

// binReader reads the Avro binary bodies of trajectories and scored records
// (trajectory.avsc, scored.avsc) straight into the Go types, without goavro's
// generic maps, which were the largest part of decoding them. Decode tries
// it first, so it makes every structural check the shape check makes (an
// int in at most five bytes and 32 bits, lengths and block sizes within the
// body, union indexes, no trailing bytes); whatever it does not expect (bad
// packed lengths included) makes ok false and Decode takes the shape check
// and the generic path, which give the error. decodeAgrees checks it
// against goavro; TestBinaryDecodersMatchGoavro on valid and mutated bodies.
type binReader struct {
	b      []byte
	ok     bool
	shared bool // packed int32/float32 arrays may be views of b (WithSharedInput)
}

func (r *binReader) long() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.ok, r.b = false, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *binReader) int() int32 {
	v, n := binary.Varint(r.b)
	if n <= 0 || n > 5 { // an Avro int takes at most five bytes
		r.ok, r.b = false, nil
		return 0
	}
	r.b = r.b[n:]
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.ok = false
	}
	return int32(v)
}

func (r *binReader) raw() []byte {
	n := r.long()
	if n < 0 || n > int64(len(r.b)) {
		r.ok, r.b = false, nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// str copies, shared or not: ids and kinds outlive their records (group
// keys, the ledger's ids), and a view would keep a record's bytes alive.
func (r *binReader) str() string { return string(r.raw()) }

// kind is str for a turn's kind: the known kinds are the package's
// constants, without an allocation each (an agent trajectory has dozens of
// turns); any other string is copied as str does.
func (r *binReader) kind() string {
	b := r.raw()
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

func (r *binReader) double() float64 {
	if len(r.b) < 8 {
		r.ok, r.b = false, nil
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *binReader) float() float32 {
	if len(r.b) < 4 {
		r.ok, r.b = false, nil
		return 0
	}
	v := math.Float32frombits(binary.LittleEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

// branch reads the index of a ["null", X] union: false for null.
func (r *binReader) branch() bool {
	switch r.long() {
	case 0:
		return false
	case 1:
		return true
	}
	r.ok = false
	return false
}

func (r *binReader) optDouble() *float64 {
	if !r.branch() {
		return nil
	}
	v := r.double()
	return &v
}

// slabDouble is optDouble with the value kept in *slab, which has room
// for it (arrayReserve sized it): one allocation for a block's values.
func (r *binReader) slabDouble(slab *[]float64) *float64 {
	if !r.branch() {
		return nil
	}
	*slab = append(*slab, r.double())
	return &(*slab)[len(*slab)-1]
}

// array calls item for every element of an array, across its blocks.
func (r *binReader) array(item func()) { r.arrayReserve(nil, item) }

// arrayReserve is array calling reserve (when not nil) with each block's
// item count before its items, so that the caller can size its slice once.
// The count it passes is at most a third of the bytes left: the items of
// the arrays it serves take at least three bytes each, so a block count
// the body cannot hold reserves no more than its items could fill.
func (r *binReader) arrayReserve(reserve func(n int), item func()) {
	for r.ok {
		n := r.long()
		if n == 0 {
			return
		}
		if n < 0 {
			if n == math.MinInt64 {
				r.ok = false
				return
			}
			n = -n
			if size := r.long(); size < 0 || size > int64(len(r.b)) { // the block's byte size
				r.ok = false
				return
			}
		}
		if n > int64(len(r.b)) { // every item takes at least one byte here
			r.ok = false
			return
		}
		if reserve != nil {
			reserve(int(min(n, int64(len(r.b))/3)))
		}
		for ; n > 0 && r.ok; n-- {
			item()
		}
	}
}

// packedInt32s reads a required packed int32 array; empty gives nil.
func packedInt32s(r *binReader) []int32 {
	b := r.raw()
	if len(b)%4 != 0 {
		r.ok = false
	}
	if len(b) == 0 || !r.ok {
		return nil
	}
	return packedOf[int32](r, b)
}

func (r *binReader) trajectory(t *Trajectory) {
	t.TrajectoryID = r.str()
	t.PromptID = r.str()
	t.GroupSize = r.int()
	t.SampleIndex = r.int()
	t.PolicyVersion = r.long()
	t.CreatedAtMs = r.long()
	t.Prompt = packedInt32s(r)
	r.arrayReserve(func(n int) { t.Turns = slices.Grow(t.Turns, n) }, func() {
		t.Turns = append(t.Turns, Turn{Kind: r.kind(), Action: packedInt32s(r), Observation: packedInt32s(r)})
	})
	t.Reward = r.optDouble()
	if r.branch() {
		s := r.str()
		t.PredAnswer = &s
	}
	r.array(func() { t.GoldAnswers = append(t.GoldAnswers, r.str()) })
	t.GoldTarget = packedInt32s(r)
	t.GoldSpan = [2]int32{r.int(), r.int()}
	if r.branch() {
		b := r.raw()
		if len(b)%4 != 0 {
			r.ok = false
		} else {
			t.RolloutLogprobs = packedOf[float32](r, b)
		}
	}
	if r.branch() {
		v := r.float()
		t.Temperature = &v
	}
	if r.branch() {
		v := r.str()
		t.Source = &v
	}
}

// packedOf is b's packed elements: a view of b when r is shared (and b not
// empty), a copy otherwise.
func packedOf[E int32 | float32](r *binReader, b []byte) []E {
	if r.shared && len(b) > 0 {
		return view[E](b)
	}
	return unpack[E](b)
}

func decodeTrajectoryBinary(body []byte, shared bool) (*Trajectory, bool) {
	r := &binReader{b: body, ok: true, shared: shared}
	t := &Trajectory{}
	r.trajectory(t)
	return t, r.ok && len(r.b) == 0
}

func decodeScoredBinary(body []byte, shared bool) (*Scored, bool) {
	r := &binReader{b: body, ok: true, shared: shared}
	s := &Scored{}
	r.trajectory(&s.Trajectory)
	s.Method = r.str()
	s.Direction = r.str()
	var vals []float64 // the turns' optional doubles, one allocation per block
	r.arrayReserve(func(n int) {
		s.Turns = slices.Grow(s.Turns, n)
		vals = make([]float64, 0, 3*n)
	}, func() {
		s.Turns = append(s.Turns, TurnScore{Delta: r.slabDouble(&vals), With: r.slabDouble(&vals), Without: r.slabDouble(&vals)})
	})
	r.array(func() {
		g := LayerGraph{Layer: r.int(), K: r.int()}
		for _, dst := range []*[]float64{&g.AA, &g.AO} {
			b := r.raw()
			if len(b)%8 != 0 {
				r.ok = false
			} else if len(b) > 0 {
				*dst = unpack[float64](b)
			}
		}
		s.Attention = append(s.Attention, g)
	})
	s.ScorerModel = r.str()
	s.ScorerPolicyVersion = r.long()
	s.Truncations = r.int()
	s.ScoredAtMs = r.long()
	s.Graphs = r.lowerGraphs()
	return s, r.ok && len(r.b) == 0
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
