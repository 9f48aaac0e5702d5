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
// with fresh arrays and buffers per sample (the naive way) and as the
// advantage stage does (one scratch per partition, encode buffers
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

// TestSampleArraysMatchNaive checks the sample's advantages and log-probs,
// written run by run of the loss mask, against the token-by-token rule:
// advantages[i] = float32(adv[i]) for every token, and the trajectory's
// log-probs in order over the mask's 1s as far as they go, 0 elsewhere.
// Groups of several lengths, with log-probs as published, cut short, too
// long and absent, and with empty action segments between turns.
func TestSampleArraysMatchNaive(t *testing.T) {
	var sc sampleScratch
	for _, n := range []int{1300, 600, 8192} {
		scs, cms, res, cfg := longGroup(t, n)
		for i := range scs {
			tr := &scs[i].Trajectory
			switch i {
			case 1:
				tr.RolloutLogprobs = tr.RolloutLogprobs[:len(tr.RolloutLogprobs)/2]
			case 2:
				tr.RolloutLogprobs = append(tr.RolloutLogprobs, -1, -2, -3)
			case 3:
				tr.RolloutLogprobs = nil
			case 4: // an empty action: two observations meet
				tr.Turns[0].Action = nil
				cms[i] = member(scs[i])
			}
			var fresh credit.TokenBuffers
			adv, mask, _ := fresh.TokenArrays(cms[i], res[i], cfg)
			smp := sample(scs[i], cms[i], res[i], cfg, &sc)
			if len(smp.Advantages) != len(adv) {
				t.Fatalf("%d tokens, member %d: %d advantages for %d tokens", n, i, len(smp.Advantages), len(adv))
			}
			for k, a := range adv {
				if smp.Advantages[k] != float32(a) {
					t.Fatalf("%d tokens, member %d: advantage %d is %v, want %v", n, i, k, smp.Advantages[k], float32(a))
				}
			}
			if tr.RolloutLogprobs == nil {
				if smp.RolloutLogprobs != nil {
					t.Fatalf("%d tokens, member %d: log-probs without any published", n, i)
				}
				continue
			}
			j := 0
			for k, mk := range mask {
				want := float32(0)
				if mk == 1 && j < len(tr.RolloutLogprobs) {
					want = tr.RolloutLogprobs[j]
					j++
				}
				if smp.RolloutLogprobs[k] != want {
					t.Fatalf("%d tokens, member %d: log-prob %d is %v, want %v", n, i, k, smp.RolloutLogprobs[k], want)
				}
			}
		}
	}
}
