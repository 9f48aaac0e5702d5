package stage

import (
	"bytes"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// TestSampleScratchMatchesFresh builds and encodes the samples of groups of
// shrinking and growing lengths with one scratch and recycled buffers, as
// the advantage stage does, and checks each against a sample built and
// encoded afresh: reused memory must carry nothing over.
func TestSampleScratchMatchesFresh(t *testing.T) {
	var sc sampleScratch
	pool := newBufferPool(outputBufferBytes)
	for _, n := range []int{8192, 1300, 600, 32 << 10, 1300} {
		scs, cms, res, cfg := longGroup(t, n)
		for i := range scs {
			if i == 2 {
				scs[i].Trajectory.RolloutLogprobs = nil // a sample without log-probs after ones with
			}
			fresh := sample(scs[i], cms[i], res[i], cfg, nil)
			want, err := schemas.Samples().Encode(&fresh)
			if err != nil {
				t.Fatal(err)
			}
			smp := sample(scs[i], cms[i], res[i], cfg, &sc)
			got, err := schemas.Samples().AppendEncode(pool.get(), &smp)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%d tokens, member %d: the sample built in reused memory differs from a fresh one", n, i)
			}
			pool.put(got)
		}
	}
	// A trajectory without tokens: its arrays are empty, not absent (an
	// absent advantages field is Avro null), with fresh and with used scratch.
	empty := &schemas.Scored{Trajectory: schemas.Trajectory{TrajectoryID: "e", PromptID: "p", GroupSize: 2,
		Turns: []schemas.Turn{{Kind: schemas.KindAnswer}}}, Turns: make([]schemas.TurnScore, 1)}
	cfg := credit.DefaultConfig()
	r := credit.Result{TrajectoryID: "e", Turns: make([]credit.TurnResult, 1)}
	fresh := sample(empty, member(empty), r, cfg, nil)
	want, err := schemas.Samples().Encode(&fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*sampleScratch{new(sampleScratch), &sc} {
		smp := sample(empty, member(empty), r, cfg, s)
		if smp.Advantages == nil {
			t.Fatal("advantages of an empty trajectory are nil (Avro null), want empty")
		}
		if got, err := schemas.Samples().Encode(&smp); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("empty trajectory: sample differs from a fresh one (%v)", err)
		}
	}
}

// BenchmarkSamples builds and encodes the five samples of a search-QA group
// as the advantage stage did before the fifth pass (fresh arrays and buffers
// per sample) and as it does now (one scratch per partition, encode buffers
// recycled after the broker's acknowledgement). B/op is the memory written
// afresh per group.
//
//	go test ./processors/stage -run '^$' -bench Samples -benchmem
func BenchmarkSamples(b *testing.B) {
	scs, cms, res, cfg := longGroup(b, 1300)
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			for i := range scs {
				smp := sample(scs[i], cms[i], res[i], cfg, nil)
				if _, err := schemas.Samples().Encode(&smp); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("reused", func(b *testing.B) {
		var sc sampleScratch
		pool := newBufferPool(outputBufferBytes)
		for b.Loop() {
			for i := range scs {
				smp := sample(scs[i], cms[i], res[i], cfg, &sc)
				out, err := schemas.Samples().AppendEncode(pool.get(), &smp)
				if err != nil {
					b.Fatal(err)
				}
				pool.put(out)
			}
		}
	})
}

// TestBufferPoolBound checks that the free list keeps at most its bound of
// bytes and hands back empty buffers with their memory.
func TestBufferPoolBound(t *testing.T) {
	p := newBufferPool(100)
	if b := p.get(); b != nil {
		t.Fatalf("empty pool gave %d bytes", cap(b))
	}
	p.put(make([]byte, 10, 60))
	p.put(make([]byte, 5, 60)) // over the bound: dropped
	p.put(nil)
	b := p.get()
	if len(b) != 0 || cap(b) != 60 {
		t.Fatalf("got len %d cap %d, want an empty 60-byte buffer", len(b), cap(b))
	}
	if p.get() != nil || p.bytes != 0 {
		t.Fatalf("pool kept a buffer over its bound (%d bytes)", p.bytes)
	}
}
