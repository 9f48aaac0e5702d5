package producers

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// TestLz4Codec checks that the lz4 codec kafka-go uses in this process is
// this package's: standard LZ4 frames (magic 0x184D2204) of 64 KiB blocks
// (BD byte 0x40), read back by kafka-go's own reader, for inputs across a
// block boundary and an empty one, with writers recycled between them.
func TestLz4Codec(t *testing.T) {
	if _, ok := kafka.Lz4.Codec().(lz4Codec); !ok {
		t.Fatalf("kafka-go's lz4 codec is %T, not this package's", kafka.Lz4.Codec())
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 17, 64 << 10, 300_000, 900_000} {
		raw := make([]byte, n)
		for i := range raw {
			raw[i] = byte(r.IntN(8)) // compressible, like a sample's arrays
		}
		var packed bytes.Buffer
		w := kafka.Lz4.Codec().NewWriter(&packed)
		if _, err := w.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b := packed.Bytes()
		if len(b) < 7 || binary.LittleEndian.Uint32(b) != 0x184D2204 {
			t.Fatalf("%d bytes: not an LZ4 frame: % x", n, b[:min(len(b), 8)])
		}
		if flg := b[4]; flg&0x04 != 0 {
			t.Fatalf("%d bytes: frame flags %#x carry a content checksum; the batch CRC covers it", n, flg)
		}
		if bd := b[5]; bd != 0x40 {
			t.Fatalf("%d bytes: block descriptor %#x, want 0x40 (64 KiB blocks)", n, bd)
		}
		back, err := io.ReadAll(compress.Lz4Codec.NewReader(bytes.NewReader(b)))
		if err != nil || !bytes.Equal(back, raw) {
			t.Fatalf("%d bytes: kafka-go's reader read %d bytes back (%v)", n, len(back), err)
		}
	}
}
