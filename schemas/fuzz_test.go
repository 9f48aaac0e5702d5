package schemas

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// corruptions returns interesting variants of valid framed bytes: truncations,
// flipped bytes, huge varints in the body, a wrong magic, trailing bytes.
func corruptions(b []byte) [][]byte {
	out := [][]byte{b, b[:headerSize], b[:len(b)/2], b[:len(b)-1], append(append([]byte(nil), b...), 0x00)}
	flip := func(i int, x byte) []byte {
		c := append([]byte(nil), b...)
		if i < len(c) {
			c[i] = x
		}
		return c
	}
	out = append(out, flip(0, 0), flip(3, b[3]^1))
	for _, i := range []int{headerSize, headerSize + 1, headerSize + 3, len(b) / 3, len(b) - 2} {
		out = append(out, flip(i, 0xff), flip(i, 0x7f), flip(i, 0x01))
	}
	// A 10-byte varint (2^62) spliced into the body.
	huge := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}
	for _, i := range []int{headerSize, headerSize + 4, len(b) / 2} {
		c := append(append(append([]byte(nil), b[:i]...), huge...), b[i:]...)
		out = append(out, c)
	}
	return out
}

// fuzzCodec checks that Decode never panics, that errors are DecodeErrors,
// that whatever decodes re-encodes to bytes that decode to the same
// re-encoding (encode∘decode is idempotent), and that validation of a
// decoded record never panics.
func fuzzCodec[T any](f *testing.F, c Codec[T], seeds [][]byte, validate func(*T)) {
	for _, s := range seeds {
		for _, v := range corruptions(s) {
			f.Add(v)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := c.Decode(b)
		if err != nil {
			if r := ReasonOf(err); r != ReasonUndecodable && r != ReasonUnknownSchema && r != ReasonTooLarge {
				t.Fatalf("decode error with reason %q: %v", r, err)
			}
			return
		}
		validate(v)
		e1, err := c.Encode(v)
		if err != nil {
			t.Fatalf("decoded value does not encode: %v", err)
		}
		v2, err := c.Decode(e1)
		if err != nil {
			t.Fatalf("re-encoded bytes do not decode: %v", err)
		}
		e2, err := c.Encode(v2)
		if err != nil || !bytes.Equal(e1, e2) {
			t.Fatalf("encode/decode not idempotent (err %v)", err)
		}
	})
}

func mustEncode[T any](f *testing.F, c Codec[T], v *T) []byte {
	b, err := c.Encode(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func FuzzDecodeTrajectory(f *testing.F) {
	c := Trajectories()
	bare := sampleTrajectory()
	bare.Reward, bare.PredAnswer, bare.RolloutLogprobs, bare.Temperature, bare.GoldTarget = nil, nil, nil, nil, nil
	seeds := [][]byte{
		mustEncode(f, c, sampleTrajectory()),
		mustEncode(f, c, bare),
		mustEncode(f, c, bigTrajectory(300, rand.New(rand.NewPCG(3, 4)))),
	}
	lim := DefaultLimits()
	fuzzCodec(f, c, seeds, func(t *Trajectory) { _ = ValidateTrajectory(t, lim) })
}

func FuzzDecodeScored(f *testing.F) {
	c := ScoredRecords()
	s2 := sampleScored()
	s2.Attention, s2.Turns = nil, nil
	seeds := [][]byte{mustEncode(f, c, sampleScored()), mustEncode(f, c, s2)}
	lim := DefaultLimits()
	fuzzCodec(f, c, seeds, func(s *Scored) { _ = ValidateScored(s, lim) })
}

func FuzzDecodeSample(f *testing.F) {
	c := Samples()
	s2 := sampleSample()
	s2.AttnSR, s2.Turns, s2.Advantages = nil, nil, nil
	seeds := [][]byte{mustEncode(f, c, sampleSample()), mustEncode(f, c, s2)}
	fuzzCodec(f, c, seeds, func(*Sample) {})
}

func FuzzDecodeDeadLetter(f *testing.F) {
	c := DeadLetters()
	d2 := sampleDeadLetter()
	d2.Key, d2.Value = nil, nil
	seeds := [][]byte{mustEncode(f, c, sampleDeadLetter()), mustEncode(f, c, d2)}
	fuzzCodec(f, c, seeds, func(*DeadLetter) {})
}

// fuzzShared checks that a codec built WithSharedInput decodes exactly what
// the copying codec does: the same bytes accepted, with values that encode
// alike, and the same errors.
func fuzzShared[T any](f *testing.F, shared, plain Codec[T], seeds [][]byte) {
	for _, s := range seeds {
		for _, v := range corruptions(s) {
			f.Add(v)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := shared.Decode(b)
		want, werr := plain.Decode(b)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("shared decode error %v, copying decode error %v", gerr, werr)
		}
		if gerr != nil {
			return
		}
		gb, err1 := plain.Encode(got)
		wb, err2 := plain.Encode(want)
		if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
			t.Fatalf("shared and copying decodes differ (%v, %v)", err1, err2)
		}
	})
}

func FuzzDecodeTrajectoryShared(f *testing.F) {
	c := Trajectories()
	seeds := [][]byte{mustEncode(f, c, sampleTrajectory()), mustEncode(f, c, bigTrajectory(300, rand.New(rand.NewPCG(5, 6))))}
	fuzzShared(f, Trajectories(WithSharedInput()), c, seeds)
}

func FuzzDecodeScoredShared(f *testing.F) {
	c := ScoredRecords()
	fuzzShared(f, ScoredRecords(WithSharedInput()), c, [][]byte{mustEncode(f, c, sampleScored())})
}
