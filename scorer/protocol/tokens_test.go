package protocol_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

func TestTokensWireFormat(t *testing.T) {
	b, err := json.Marshal(scorer.Tokens{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	// 01 00 00 00 02 00 00 00 in base64.
	if string(b) != `"AQAAAAIAAAA="` {
		t.Fatalf("Tokens{1,2} = %s, want \"AQAAAAIAAAA=\"", b)
	}
	in := scorer.Tokens{0, -1, 259, math.MaxInt32, math.MinInt32, 65536}
	b, _ = json.Marshal(in)
	var out scorer.Tokens
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("round trip length %d, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Fatalf("round trip [%d] = %d, want %d", i, out[i], in[i])
		}
	}
	for _, bad := range []string{`[1,2]`, `"AQAAAAI="`, `"!!!"`} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("Unmarshal(%s) accepted, want an error", bad)
		}
	}
	// Scores: non-finite travels as null and comes back as NaN.
	b, _ = json.Marshal([]protocol.Score{protocol.Score(-1.25), protocol.Score(math.Inf(-1)), protocol.Score(0.1)})
	if string(b) != `[-1.25,null,0.1]` {
		t.Fatalf("scores = %s", b)
	}
	var sc []protocol.Score
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	if sc[0] != -1.25 || !math.IsNaN(float64(sc[1])) || sc[2] != 0.1 {
		t.Fatalf("scores round trip = %v", sc)
	}
}

// BenchmarkTokenCodec compares the wire form of a 32k-token array (base64
// of little-endian int32) with plain JSON numbers: bytes and encode+decode time.
//
//	go test ./scorer/protocol/ -run XXX -bench TokenCodec
func BenchmarkTokenCodec(b *testing.B) {
	ids := make([]int32, 32768)
	for i := range ids {
		ids[i] = int32((i * 7919) % 151936) // Qwen-sized ids
	}
	b.Run("base64-int32", func(b *testing.B) {
		var out scorer.Tokens
		for i := 0; i < b.N; i++ {
			buf, _ := json.Marshal(scorer.Tokens(ids))
			if err := json.Unmarshal(buf, &out); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
		}
	})
	b.Run("json-numbers", func(b *testing.B) {
		var out []int32
		for i := 0; i < b.N; i++ {
			buf, _ := json.Marshal(ids)
			if err := json.Unmarshal(buf, &out); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
		}
	})
}
