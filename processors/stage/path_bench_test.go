package stage

import (
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// BenchmarkAdvantagePath runs the advantage stage's own work on the five
// records of a search-QA group, without Kafka: decoding (with the codec the
// stage uses), validating, computing the group, building and encoding the
// samples. Each sub-benchmark runs the path up to its step, so the
// differences between them are the steps' costs; us/rec is per record.
//
//	go test ./processors/stage -run '^$' -bench AdvantagePath -benchmem
func BenchmarkAdvantagePath(b *testing.B) {
	scs, _, _, cfg := longGroup(b, 1300)
	var raw [][]byte
	for _, s := range scs {
		bs, err := schemas.ScoredRecords().Encode(s)
		if err != nil {
			b.Fatal(err)
		}
		raw = append(raw, bs)
	}
	codec := schemas.ScoredRecords(schemas.WithSharedInput())
	lim := schemas.DefaultLimits()
	lim.VocabSize = 0 // as the stage: the score stage checked the ids against the vocabulary
	var sc sampleScratch
	pool := newBufferPool(outputBufferBytes)
	var ema credit.EMA
	path := func(b *testing.B, upto int) {
		ds := make([]*schemas.Scored, len(raw))
		cms := make([]credit.Member, len(raw))
		for i, r := range raw {
			d, err := codec.Decode(r)
			if err != nil {
				b.Fatal(err)
			}
			ds[i] = d
			if upto < 1 {
				continue
			}
			if err := schemas.ValidateScored(d, lim); err != nil {
				b.Fatal(err)
			}
			if cms[i] = member(d); credit.ValidateMember(cms[i], cfg) != nil {
				b.Fatal("invalid member")
			}
		}
		if upto < 2 {
			return
		}
		res, err := credit.ComputeValidatedGroup(cms, false, cfg, &ema)
		if err != nil {
			b.Fatal(err)
		}
		for i := range res {
			if upto < 3 {
				break
			}
			smp := sample(ds[i], cms[i], res[i], cfg, &sc)
			if upto < 4 {
				continue
			}
			out, err := schemas.Samples().AppendEncode(pool.get(), &smp)
			if err != nil {
				b.Fatal(err)
			}
			pool.put(out)
		}
	}
	for upto, name := range []string{"decode", "validate", "compute", "sample", "encode"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				path(b, upto)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(raw))/1000, "us/rec")
		})
	}
}
