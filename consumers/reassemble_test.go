package consumers_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// log turns messages into records at consecutive offsets from 0.
func log(msgs ...producers.Message) []consumers.Record {
	out := make([]consumers.Record, len(msgs))
	for i, m := range msgs {
		out[i] = consumers.Record{Topic: "t", Offset: int64(i), Key: m.Key, Value: m.Value, Headers: m.Headers}
	}
	return out
}

func feed(a *consumers.Assembler, recs []consumers.Record) (out []consumers.Record, broken []consumers.Broken) {
	for _, r := range recs {
		o, b := a.Add(r)
		if o != nil {
			out = append(out, *o)
		}
		broken = append(broken, b...)
	}
	return out, broken
}

func TestAssemblerInterleavedRecords(t *testing.T) {
	hdr := []producers.Header{{Key: "creditflow-schema", Value: []byte("io.creditflow.v1.Sample")}}
	big1 := producers.Message{Key: []byte("a"), Value: randBytes(10_000, 1), Headers: hdr}
	big2 := producers.Message{Key: []byte("b"), Value: randBytes(7_001, 2)}
	small := producers.Message{Key: []byte("c"), Value: []byte("plain"), Headers: hdr}
	c1, c2 := producers.Split(big1, 3000), producers.Split(big2, 3000)
	if len(c1) != 4 || len(c2) != 3 {
		t.Fatalf("chunks: %d and %d, want 4 and 3", len(c1), len(c2))
	}
	// c1[0] c2[0] small c1[1] c2[1] c1[2] c2[2] c1[3]
	recs := log(c1[0], c2[0], small, c1[1], c2[1], c1[2], c2[2], c1[3])
	a := consumers.NewAssembler(consumers.ReassemblyConfig{})
	var got []consumers.Record
	var clamps []int64
	for _, r := range recs {
		o, b := a.Add(r)
		if len(b) > 0 {
			t.Fatalf("broken: %+v", b[0].Detail)
		}
		if o != nil {
			got = append(got, *o)
		}
		clamps = append(clamps, a.Clamp(r.Offset+1))
	}
	if len(got) != 3 {
		t.Fatalf("%d records out, want 3", len(got))
	}
	if got[0].Offset != 2 || !bytes.Equal(got[0].Value, small.Value) || len(got[0].Headers) != 1 {
		t.Fatalf("plain record changed: %+v", got[0])
	}
	if got[1].Offset != 6 || !bytes.Equal(got[1].Value, big2.Value) || string(got[1].Key) != "b" || len(got[1].Headers) != 0 {
		t.Fatalf("record b: offset %d, %d bytes, headers %v", got[1].Offset, len(got[1].Value), got[1].Headers)
	}
	if got[2].Offset != 7 || !bytes.Equal(got[2].Value, big1.Value) || len(got[2].Headers) != 1 || got[2].Headers[0].Key != "creditflow-schema" {
		t.Fatalf("record a: offset %d, %d bytes, headers %v", got[2].Offset, len(got[2].Value), got[2].Headers)
	}
	// Every commit before a's last chunk stays at offset 0 (a's first
	// chunk); a commit past a's last chunk is a's consumer saying a is done.
	if clamps[7] != 8 {
		t.Fatalf("clamp(8) = %d, want 8", clamps[7])
	}
	for i, c := range clamps[:7] {
		if c != 0 {
			t.Fatalf("clamp after offset %d = %d, want 0", i, c)
		}
	}
	a.Committed(7) // b handled, a not yet
	if c := a.Clamp(7); c != 0 {
		t.Fatalf("clamp(7) = %d with a delivered but unfinished, want 0", c)
	}
	a.Committed(8)
	if c := a.Clamp(8); c != 8 {
		t.Fatalf("clamp(8) = %d after everything finished, want 8", c)
	}
	if s := a.Stats(); s.Reassembled != 2 || s.Broken != 0 || s.Stray != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestAssemblerBrokenSequences(t *testing.T) {
	big := producers.Message{Key: []byte("k"), Value: randBytes(9_000, 3)}
	c := producers.Split(big, 3000)

	t.Run("gap then whole rewrite", func(t *testing.T) {
		// chunk 1 lost in a failed write; the producer rewrites the record whole.
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		out, broken := feed(a, log(c[0], c[2], c[0], c[1], c[2]))
		if len(broken) != 1 || broken[0].Reason != consumers.ReasonChunkIncomplete || broken[0].Offset != 0 {
			t.Fatalf("broken %+v, want one chunk_incomplete at offset 0", broken)
		}
		if len(out) != 1 || !bytes.Equal(out[0].Value, big.Value) || out[0].Offset != 4 {
			t.Fatalf("the rewritten record was not delivered whole")
		}
		if cl := a.Clamp(5); cl != 0 {
			t.Fatalf("clamp %d: the unreleased dead letter must hold offset 0", cl)
		}
		a.Release(broken[0])
		a.Committed(5)
		if cl := a.Clamp(5); cl != 5 {
			t.Fatalf("clamp %d after release and commit, want 5", cl)
		}
	})
	t.Run("restart of chunk 0", func(t *testing.T) {
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		out, broken := feed(a, log(c[0], c[1], c[0], c[1], c[2]))
		if len(broken) != 0 || len(out) != 1 || !bytes.Equal(out[0].Value, big.Value) {
			t.Fatalf("out %d broken %+v", len(out), broken)
		}
	})
	t.Run("stray tails", func(t *testing.T) {
		// A reader that starts after the first chunk (already consumed).
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		out, broken := feed(a, log(c[1], c[2], producers.Message{Value: []byte("x")}))
		if len(broken) != 0 || len(out) != 1 || a.Stats().Stray != 2 {
			t.Fatalf("out %d broken %d stats %+v", len(out), len(broken), a.Stats())
		}
	})
	t.Run("corrupt bytes", func(t *testing.T) {
		bad := c[1]
		bad.Value = append([]byte(nil), bad.Value...)
		bad.Value[10] ^= 1
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		out, broken := feed(a, log(c[0], bad, c[2]))
		if len(out) != 0 || len(broken) != 1 || broken[0].Reason != consumers.ReasonChunkCorrupt || len(broken[0].Value) != 9000 {
			t.Fatalf("out %d broken %+v", len(out), broken)
		}
	})
	t.Run("bad headers", func(t *testing.T) {
		bad := c[1]
		bad.Headers = []producers.Header{{Key: chunk.HeaderPosition, Value: []byte("7/3")}}
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		_, broken := feed(a, log(bad))
		if len(broken) != 1 || broken[0].Reason != consumers.ReasonChunkCorrupt {
			t.Fatalf("broken %+v", broken)
		}
	})
	t.Run("too large", func(t *testing.T) {
		a := consumers.NewAssembler(consumers.ReassemblyConfig{MaxRecordBytes: 5000})
		out, broken := feed(a, log(c...))
		if len(out) != 0 || len(broken) != 1 || broken[0].Reason != consumers.ReasonChunkTooLarge || a.Stats().Stray != 2 {
			t.Fatalf("out %d broken %+v stats %+v", len(out), broken, a.Stats())
		}
	})
	t.Run("span bound", func(t *testing.T) {
		a := consumers.NewAssembler(consumers.ReassemblyConfig{MaxSpan: 3})
		msgs := []producers.Message{c[0], c[1]}
		for i := 0; i < 5; i++ {
			msgs = append(msgs, producers.Message{Value: []byte{byte(i)}})
		}
		msgs = append(msgs, c[2])
		out, broken := feed(a, log(msgs...))
		if len(out) != 5 || len(broken) != 1 || broken[0].Reason != consumers.ReasonChunkIncomplete || len(broken[0].Value) != 6000 {
			t.Fatalf("out %d broken %+v", len(out), broken)
		}
		if a.Stats().Stray != 1 {
			t.Fatalf("the late last chunk should be a stray: %+v", a.Stats())
		}
	})
	t.Run("memory bound", func(t *testing.T) {
		ov := randBytes(9_000, 4)
		other := producers.Split(producers.Message{Value: ov}, 3000)
		a := consumers.NewAssembler(consumers.ReassemblyConfig{MaxPendingBytes: 10_000})
		out, broken := feed(a, log(c[0], other[0], c[1], other[1], c[2], other[2]))
		// Held: 3000, 6000, 9000, 12000 > 10000: c (the oldest) is given up.
		if len(broken) != 1 || broken[0].Offset != 0 || len(out) != 1 || !bytes.Equal(out[0].Value, ov) || out[0].Offset != 5 {
			t.Fatalf("out %d broken %+v", len(out), broken)
		}
	})
}

// TestAssemblerDeterministic feeds a random interleaving twice.
func TestAssemblerDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var queues [][]producers.Message
	for i := 0; i < 6; i++ {
		queues = append(queues, producers.Split(producers.Message{Key: []byte{byte(i)}, Value: randBytes(1000+r.IntN(5000), uint64(i))}, 700))
	}
	var msgs []producers.Message
	for len(queues) > 0 {
		i := r.IntN(len(queues))
		msgs = append(msgs, queues[i][0])
		if queues[i] = queues[i][1:]; len(queues[i]) == 0 {
			queues = append(queues[:i], queues[i+1:]...)
		}
	}
	run := func() []consumers.Record {
		out, broken := feed(consumers.NewAssembler(consumers.ReassemblyConfig{}), log(msgs...))
		if len(broken) != 0 || len(out) != 6 {
			t.Fatalf("%d out, %d broken", len(out), len(broken))
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i].Offset != b[i].Offset || !bytes.Equal(a[i].Value, b[i].Value) || (i > 0 && a[i].Offset <= a[i-1].Offset) {
			t.Fatal("two runs differ, or offsets do not increase")
		}
	}
}

// TestGroupReassemblesOnDefaultBroker writes a 3 MB record (chunked by the
// producer) between plain ones to a broker with Kafka's default 1 MiB
// message limit; a group with Reassembly reads it whole, and a restart
// from its commit never loses the record.
func TestGroupReassemblesOnDefaultBroker(t *testing.T) {
	brokers := brokertest.Start(t, broker.WithTopics(1, "big")).Addrs()
	p := newProducer(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := randBytes(3_000_000, 7)
	msgs := []producers.Message{
		{Topic: "big", Key: []byte("k"), Value: []byte("before")},
		{Topic: "big", Key: []byte("k"), Value: big, Headers: []producers.Header{{Key: "creditflow-schema", Value: []byte("x")}}},
		{Topic: "big", Key: []byte("k"), Value: []byte("after")},
	}
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	raw := 0
	if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, "big", 0, -2, func(r consumers.Record) error {
		raw++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if raw != 2+4 { // 3,000,000 bytes in 768 KiB chunks
		t.Fatalf("%d messages on the topic, want 6", raw)
	}

	// One member handles "before" and stops; the next one starts from its
	// commit and must get the big record whole, then "after".
	read := func(stopAfter int) []consumers.Record {
		g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: "g", Topics: []string{"big"},
			Reassembly: &consumers.ReassemblyConfig{}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		var got []consumers.Record
		done := make(chan error, 1)
		go func() {
			done <- g.Run(rctx, func(hctx context.Context, c consumers.Claim, commit consumers.CommitFunc) error {
				for r := range c.Records {
					got = append(got, r)
					if err := commit(hctx, r.Offset+1); err != nil {
						t.Errorf("commit: %v", err)
					}
					if len(got) == stopAfter {
						stop()
						return nil
					}
				}
				return nil
			})
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := read(1)
	if len(first) != 1 || string(first[0].Value) != "before" {
		t.Fatalf("first read: %d records", len(first))
	}
	second := read(2)
	if len(second) != 2 || !bytes.Equal(second[0].Value, big) || string(second[1].Value) != "after" {
		t.Fatalf("second read: %d records", len(second))
	}
	if len(second[0].Headers) != 1 || second[0].Offset != 4 || second[1].Offset != 5 {
		t.Fatalf("big record: offset %d headers %v; after: offset %d", second[0].Offset, second[0].Headers, second[1].Offset)
	}
	cs, err := consumers.CommittedOffsets(ctx, brokers, kafkasec.Config{}, "g", "big", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if cs[0] != 6 {
		t.Fatalf("committed %v, want 6 after everything", cs)
	}
}
