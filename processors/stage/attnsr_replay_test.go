package stage_test

import (
	"context"
	"crypto/sha256"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// TestV2AttnSRGoldenThroughAdvantage replays AttnSR scored records of the
// generation before compact graphs (K×K in attention, v2) and of the one
// before the sum form (compact pairs, v3) through the advantage stage: the
// samples it writes are, byte for byte, those the code of the second
// generation computed (their SHA-256 digests are kept), for both outputs.
func TestV2AttnSRGoldenThroughAdvantage(t *testing.T) {
	for _, gen := range []string{"v2", "v3"} {
		for _, output := range vocab.Outputs {
			t.Run(gen+"/"+string(output), func(t *testing.T) { replayGolden(t, gen, output) })
		}
	}
}

func replayGolden(t *testing.T, gen string, output vocab.Output) {
	read := func(name string) [][]byte { return goldenHex(t, gen, name) }
	{
		{
			e := newEnv(t, 1, func(cfg *stage.Config) {
				cfg.Credit.Method, cfg.Credit.Output = credit.MethodAttnSR, output
			})
			e.runStages(t, nil)
			var msgs []producers.Message
			var ids []string
			for _, b := range read("scored_attnsr_groups") {
				s, err := schemas.ScoredRecords().Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, producers.Message{Topic: e.cfg.Topics.Scored, Key: []byte(s.Trajectory.PromptID), Value: b})
				ids = append(ids, s.Trajectory.TrajectoryID)
			}
			if err := e.prod.Produce(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the samples of the golden records", func() bool { return len(keysOn(t, e.cfg.Brokers, e.cfg.Topics.Samples)) == len(msgs) })
			want := goldenHex(t, "v2", "samples_attnsr_"+string(output)+".sha256")
			recs := readTopic(t, e.cfg.Brokers, e.cfg.Topics.Samples)[0]
			if len(recs) != len(want) {
				t.Fatalf("%d samples, want %d", len(recs), len(want))
			}
			got := map[string][32]byte{} // samples of different groups may interleave on the topic
			for _, r := range recs {
				got[sampleID(t, r)] = sha256.Sum256(r.Value)
			}
			for i, id := range ids {
				if h := got[id]; string(h[:]) != string(want[i]) {
					t.Fatalf("sample %d (%s) differs from the golden one", i, id)
				}
			}
		}
	}
}
