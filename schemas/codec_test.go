package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/linkedin/goavro/v2"
)

func roundTrip[T any](t *testing.T, c Codec[T], v *T) *T {
	t.Helper()
	b, err := c.Encode(v)
	if err != nil {
		t.Fatalf("encode %s: %v", c.Name(), err)
	}
	got, err := c.Decode(b)
	if err != nil {
		t.Fatalf("decode %s: %v", c.Name(), err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("%s round trip differs:\n got  %.400s\n want %.400s", c.Name(), fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", v))
	}
	b2, err := c.Encode(got)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("%s: re-encoding the decoded value gives different bytes (err %v)", c.Name(), err)
	}
	return got
}

func TestRoundTripAllRecords(t *testing.T) {
	roundTrip(t, Trajectories(), sampleTrajectory())
	roundTrip(t, ScoredRecords(), sampleScored())
	roundTrip(t, Samples(), sampleSample())
	roundTrip(t, DeadLetters(), sampleDeadLetter())
	roundTrip(t, Trajectories(), bigTrajectory(8192, rand.New(rand.NewPCG(1, 2))))
}

func TestRoundTripOptionalNilVsEmpty(t *testing.T) {
	// Nullable fields: nil and empty are different values and both survive.
	tr := sampleTrajectory()
	tr.Reward, tr.PredAnswer, tr.Temperature, tr.RolloutLogprobs = nil, nil, nil, nil
	roundTrip(t, Trajectories(), tr)
	tr.PredAnswer = ptr("")
	tr.Reward = ptr(0.0)
	roundTrip(t, Trajectories(), tr)
	// Empty rollout log-probs stay non-nil and empty (a trajectory whose
	// turns have no policy tokens would carry it).
	tr.RolloutLogprobs = []float32{}
	got := roundTrip(t, Trajectories(), tr)
	if got.RolloutLogprobs == nil {
		t.Fatal("empty rollout_logprobs decoded as nil")
	}

	s := sampleSample()
	s.Advantages, s.TokenRewards, s.RolloutLogprobs, s.Temperature, s.AttnSR = nil, []float32{}, nil, nil, nil
	s.Turns = nil
	got2 := roundTrip(t, Samples(), s)
	if got2.TokenRewards == nil || got2.Advantages != nil {
		t.Fatalf("nil/empty optional arrays not preserved: advantages %v token_rewards %v", got2.Advantages, got2.TokenRewards)
	}

	d := sampleDeadLetter()
	d.Key, d.Value = nil, []byte{}
	got3 := roundTrip(t, DeadLetters(), d)
	if got3.Key != nil || got3.Value == nil {
		t.Fatalf("dead letter key/value nil-ness lost: %v %v", got3.Key, got3.Value)
	}

	// Required arrays decode empty as nil; encoding nil and empty is the same.
	a, b := sampleTrajectory(), sampleTrajectory()
	a.Turns[1].Observation, b.Turns[1].Observation = nil, []int32{}
	a.GoldAnswers, b.GoldAnswers = nil, []string{}
	ba, _ := Trajectories().Encode(a)
	bb, _ := Trajectories().Encode(b)
	if !bytes.Equal(ba, bb) {
		t.Fatal("nil and empty required arrays encode differently")
	}
}

func TestRoundTripSpecialFloats(t *testing.T) {
	// The codec carries any float bit pattern; validation rejects the bad ones.
	tr := sampleTrajectory()
	tr.Reward = ptr(math.Inf(-1))
	tr.RolloutLogprobs = []float32{float32(math.Inf(1)), -0, math.SmallestNonzeroFloat32}
	got := roundTrip(t, Trajectories(), tr)
	if !math.IsInf(*got.Reward, -1) {
		t.Fatalf("reward = %v", *got.Reward)
	}
	tr.Reward = ptr(math.NaN())
	b, _ := Trajectories().Encode(tr)
	got, err := Trajectories().Decode(b)
	if err != nil || !math.IsNaN(*got.Reward) {
		t.Fatalf("NaN reward: %v %v", got, err)
	}
	if ReasonOf(ValidateTrajectory(got, DefaultLimits())) != ReasonNonFiniteReward {
		t.Fatal("NaN reward passed validation")
	}
}

func TestDeterministicBytes(t *testing.T) {
	for i := 0; i < 20; i++ {
		a, _ := ScoredRecords().Encode(sampleScored())
		b, _ := ScoredRecords().Encode(sampleScored())
		if !bytes.Equal(a, b) {
			t.Fatal("same scored record gave different bytes")
		}
		c, _ := Samples().Encode(sampleSample())
		d, _ := Samples().Encode(sampleSample())
		if !bytes.Equal(c, d) {
			t.Fatal("same sample gave different bytes")
		}
	}
}

func TestHeaderAndFingerprint(t *testing.T) {
	codecs := []struct {
		name, schema string
		fp           [8]byte
		enc          func() ([]byte, error)
	}{
		{NameTrajectory, trajectorySchema, Trajectories().Fingerprint(), func() ([]byte, error) { return Trajectories().Encode(sampleTrajectory()) }},
		{NameScored, scoredSchema, ScoredRecords().Fingerprint(), func() ([]byte, error) { return ScoredRecords().Encode(sampleScored()) }},
		{NameSample, sampleSchema, Samples().Fingerprint(), func() ([]byte, error) { return Samples().Encode(sampleSample()) }},
		{NameDeadLetter, deadLetterSchema, DeadLetters().Fingerprint(), func() ([]byte, error) { return DeadLetters().Encode(sampleDeadLetter()) }},
		{NamePolicy, policySchema, Policies().Fingerprint(), func() ([]byte, error) {
			return Policies().Encode(&PolicyAnnouncement{Version: 7, Checkpoint: "/ckpt/7", AnnouncedAtMs: 1_764_500_000_000})
		}},
	}
	seen := map[[8]byte]string{}
	for _, c := range codecs {
		ac, err := goavro.NewCodec(c.schema)
		if err != nil {
			t.Fatal(err)
		}
		// Independent CRC-64-AVRO over the canonical form.
		var want [8]byte
		binary.LittleEndian.PutUint64(want[:], rabinSpec([]byte(ac.CanonicalSchema())))
		if c.fp != want {
			t.Errorf("%s fingerprint %x, spec computation %x", c.name, c.fp, want)
		}
		b, err := c.enc()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 0xc3 || b[1] != 0x01 || !bytes.Equal(b[2:10], want[:]) {
			t.Errorf("%s header %x", c.name, b[:10])
		}
		if SchemaOf(b) != c.name {
			t.Errorf("SchemaOf = %q, want %q", SchemaOf(b), c.name)
		}
		// goavro's own single-object decoder accepts our bytes.
		if _, rest, err := ac.NativeFromSingle(b); err != nil || len(rest) != 0 {
			t.Errorf("%s: goavro NativeFromSingle: %v, %d bytes left", c.name, err, len(rest))
		}
		if prev, dup := seen[c.fp]; dup {
			t.Errorf("%s and %s share a fingerprint", prev, c.name)
		}
		seen[c.fp] = c.name
	}
	if SchemaOf([]byte{0xc3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}) != "" || SchemaOf(nil) != "" {
		t.Error("SchemaOf recognized garbage")
	}
}

// rabinSpec is CRC-64-AVRO exactly as the Avro specification writes it.
func rabinSpec(buf []byte) uint64 {
	const empty = 0xc15d213aa4d7a795
	var table [256]uint64
	for i := range table {
		fp := uint64(i)
		for j := 0; j < 8; j++ {
			fp = (fp >> 1) ^ (empty & -(fp & 1))
		}
		table[i] = fp
	}
	fp := uint64(empty)
	for _, b := range buf {
		fp = (fp >> 8) ^ table[byte(fp)^b]
	}
	return fp
}

func TestScoredEmbedsTrajectorySchema(t *testing.T) {
	// scored.avsc inlines the Trajectory record; it must stay identical to
	// trajectory.avsc or the two topics would disagree.
	tc, _ := goavro.NewCodec(trajectorySchema)
	sc, _ := goavro.NewCodec(scoredSchema)
	if !strings.Contains(sc.CanonicalSchema(), tc.CanonicalSchema()) {
		t.Fatalf("scored.avsc's Trajectory differs from trajectory.avsc:\n%s\n%s", tc.CanonicalSchema(), sc.CanonicalSchema())
	}
}

func decodeReason[T any](c Codec[T], b []byte) string {
	_, err := c.Decode(b)
	var de *DecodeError
	if err == nil {
		return ""
	}
	if !errors.As(err, &de) {
		return "not a DecodeError: " + err.Error()
	}
	return de.Reason
}

func TestDecodeErrors(t *testing.T) {
	good, _ := Trajectories().Encode(sampleTrajectory())
	scored, _ := ScoredRecords().Encode(sampleScored())

	if r := decodeReason(Trajectories(), scored); r != ReasonUnknownSchema {
		t.Errorf("scored bytes as trajectory: %q", r)
	}
	if r := decodeReason(ScoredRecords(), good); r != ReasonUnknownSchema {
		t.Errorf("trajectory bytes as scored: %q", r)
	}
	_, err := Trajectories().Decode(scored)
	if !strings.Contains(DetailOf(err), NameScored) {
		t.Errorf("unknown_schema detail does not name the actual schema: %v", err)
	}
	other := append([]byte(nil), good...)
	other[5] ^= 0xff
	if r := decodeReason(Trajectories(), other); r != ReasonUnknownSchema {
		t.Errorf("flipped fingerprint: %q", r)
	}
	for n := 0; n < len(good); n++ {
		if r := decodeReason(Trajectories(), good[:n]); r != ReasonUndecodable {
			t.Fatalf("truncated to %d of %d bytes: %q", n, len(good), r)
		}
	}
	if r := decodeReason(Trajectories(), append(append([]byte(nil), good...), 0)); r != ReasonUndecodable {
		t.Errorf("trailing byte: %q", r)
	}
	notSOE := append([]byte{0x00, 0x01}, good[2:]...)
	if r := decodeReason(Trajectories(), notSOE); r != ReasonUndecodable {
		t.Errorf("bad magic: %q", r)
	}
	small := Trajectories(WithMaxBytes(len(good) - 1))
	if r := decodeReason(small, good); r != ReasonTooLarge {
		t.Errorf("over size ceiling: %q", r)
	}
	if _, err := Trajectories().Encode(nil); err == nil {
		t.Error("encoding nil succeeded")
	}
}

func frame(fp [8]byte, body ...[]byte) []byte {
	b := append([]byte{0xc3, 0x01}, fp[:]...)
	for _, p := range body {
		b = append(b, p...)
	}
	return b
}

func zz(v int64) []byte { return binary.AppendUvarint(nil, uint64(v<<1^v>>63)) }

func TestDecodeHostileLengths(t *testing.T) {
	fp := Trajectories().Fingerprint()
	head := [][]byte{zz(1), []byte("t"), zz(1), []byte("p"), zz(1), zz(0), zz(0), zz(0)}
	cases := map[string][]byte{
		"prompt length 2^62":             frame(fp, append(head, zz(1<<62))...),
		"prompt length negative":         frame(fp, append(head, zz(-5))...),
		"turns count 2^31-1":             frame(fp, append(head, zz(0), zz(math.MaxInt32))...),
		"turns count 2^62":               frame(fp, append(head, zz(0), zz(1<<62))...),
		"turns negative count huge size": frame(fp, append(head, zz(0), zz(-3), zz(1<<40))...),
		"turns min int64":                frame(fp, append(head, zz(0), zz(math.MinInt64))...),
		"overlong varint":                frame(fp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
		"int out of range":               frame(fp, append(head[:4], zz(1<<40))...),
	}
	for name, b := range cases {
		if r := decodeReason(Trajectories(), b); r != ReasonUndecodable {
			t.Errorf("%s: %q", name, r)
		}
	}
	// A packed field that is not a whole number of elements.
	tr := sampleTrajectory()
	nb := trajectoryToNative(tr)
	nb["prompt"] = []byte{1, 2, 3, 4, 5}
	ac, _ := goavro.NewCodec(trajectorySchema)
	body, err := ac.BinaryFromNative(nil, nb)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Trajectories().Decode(frame(fp, body))
	if ReasonOf(err) != ReasonUndecodable || !strings.Contains(err.Error(), "multiple") {
		t.Errorf("5-byte packed int32 field: %v", err)
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	b, _ := DeadLetters().Encode(sampleDeadLetter())
	d, err := DeadLetters().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xee
	}
	if !reflect.DeepEqual(d, sampleDeadLetter()) {
		t.Fatal("decoded dead letter changed when the input buffer was overwritten")
	}
}

func TestConcurrentUse(t *testing.T) {
	want, _ := ScoredRecords().Encode(sampleScored())
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				b, err := ScoredRecords().Encode(sampleScored())
				if err != nil || !bytes.Equal(b, want) {
					errs <- "encode mismatch"
					return
				}
				if _, err := ScoredRecords().Decode(b); err != nil {
					errs <- err.Error()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestKnownAnswer pins the exact bytes of a tiny trajectory, derived by hand
// from the Avro 1.11 binary encoding rules, so any change of the wire format
// is caught.
func TestKnownAnswer(t *testing.T) {
	tr := &Trajectory{
		TrajectoryID: "t", PromptID: "p", GroupSize: 1, SampleIndex: 0,
		PolicyVersion: 300, CreatedAtMs: -1,
		Prompt:      []int32{1},
		Turns:       []Turn{{Kind: KindAnswer, Action: []int32{258}}},
		Reward:      ptr(1.0),
		Temperature: ptr(float32(0.5)),
	}
	body := "" +
		"0274" + // trajectory_id: length 1 (zig-zag 2), "t"
		"0270" + // prompt_id: "p"
		"02" + // group_size 1
		"00" + // sample_index 0
		"d804" + // policy_version 300: zig-zag 600 = 0x258 -> 0xd8 0x04
		"01" + // created_at_ms -1: zig-zag 1
		"08" + "01000000" + // prompt: 4 bytes, int32 1 little-endian
		"02" + // turns: block of 1 item
		"0c" + "616e73776572" + // kind "answer"
		"08" + "02010000" + // action: int32 258 = 0x00000102 little-endian
		"00" + // observation: empty bytes
		"00" + // end of turns
		"02" + "000000000000f03f" + // reward: union branch 1 (double), 1.0
		"00" + // pred_answer: null
		"00" + // gold_answers: empty array
		"00" + // gold_target: empty bytes
		"00" + "00" + // gold_span_start, gold_span_end
		"00" + // rollout_logprobs: null
		"02" + "0000003f" + // temperature: union branch 1 (float), 0.5
		"00" // source: null
	fp := Trajectories().Fingerprint()
	want := "c301" + hex.EncodeToString(fp[:]) + body
	got, err := Trajectories().Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != want {
		t.Fatalf("bytes\n got  %x\n want %s", got, want)
	}
	// The fingerprint itself is pinned: changing trajectory.avsc in a way
	// that changes its canonical form is a wire-format change (new version).
	if h := hex.EncodeToString(fp[:]); h != pinnedTrajectoryFingerprint {
		t.Fatalf("trajectory fingerprint is %s, pinned %s", h, pinnedTrajectoryFingerprint)
	}
	dec, err := Trajectories().Decode(got)
	if err != nil || !reflect.DeepEqual(dec, tr) {
		t.Fatalf("decode known answer: %v %+v", err, dec)
	}
}

const pinnedTrajectoryFingerprint = "77309f0cca652008"

// TestPinnedFingerprints pins every schema's fingerprint as documented in
// docs/wire-format.md. A change here is a wire-format change: follow the
// evolution rules there (register the old schema in schemas/evolution.go,
// keep golden bytes) before editing the pin.
func TestPinnedFingerprints(t *testing.T) {
	pins := map[string]string{
		NameTrajectory: pinnedTrajectoryFingerprint,
		NameScored:     "0e4dc40f777a149a",
		NameSample:     "f671dfa332673a52",
		NameDeadLetter: "d52182524e0dbca9",
		NamePolicy:     "045df95fbcb1b418",
	}
	fps := map[string][8]byte{
		NameTrajectory: Trajectories().Fingerprint(),
		NameScored:     ScoredRecords().Fingerprint(),
		NameSample:     Samples().Fingerprint(),
		NameDeadLetter: DeadLetters().Fingerprint(),
		NamePolicy:     Policies().Fingerprint(),
	}
	for name, pin := range pins {
		fp := fps[name]
		if got := hex.EncodeToString(fp[:]); got != pin {
			t.Errorf("%s fingerprint %s, pinned %s", name, got, pin)
		}
	}
}
