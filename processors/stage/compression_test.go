package stage

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// longTrajectory is a realistic trajectory of about n tokens: token ids
// drawn from a Zipf law over a 151,936-token vocabulary (natural-language
// token frequencies are Zipfian), a prompt, tool calls with long
// observations, a final answer, and one log-prob per policy token.
func longTrajectory(n int, seed uint64, sample int) schemas.Trajectory {
	r := rand.New(rand.NewPCG(seed, uint64(sample)))
	z := rand.NewZipf(r, 1.07, 2, schemas.DefaultVocabSize-1)
	ids := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(z.Uint64())
		}
		return out
	}
	t := schemas.Trajectory{
		TrajectoryID: fmt.Sprintf("p%d-%d", seed, sample), PromptID: fmt.Sprintf("p%d", seed),
		GroupSize: 5, SampleIndex: int32(sample), PolicyVersion: 3, CreatedAtMs: 1_767_225_600_000 + int64(sample),
		Prompt: ids(250),
	}
	used := 250 + 30
	// Search-QA: 1–3 searches of ≈ 60 + 450 tokens. Longer: turns of
	// ≈ 150 action + 3,000 observation tokens until n is reached.
	act, obs := 60, 450
	turns := 1 + r.IntN(3)
	if n > 4096 {
		act, obs = 150, 3000
		turns = (n - used) / (act + obs)
	}
	for i := 0; i < turns; i++ {
		a, o := act+r.IntN(act/4), obs+r.IntN(obs/4)
		if n > 4096 && used+a+o > n {
			o = max(n-used-a, 1)
		}
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindSearch, Action: ids(a), Observation: ids(o)})
		used += a + o
	}
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: ids(30)})
	pred := "paris"
	t.PredAnswer, t.GoldAnswers = &pred, []string{"paris", "Paris, France"}
	t.GoldTarget = ids(24)
	t.GoldSpan = [2]int32{18, 20}
	np := 0
	for _, tu := range t.Turns {
		np += len(tu.Action)
	}
	t.RolloutLogprobs = make([]float32, np)
	for i := range t.RolloutLogprobs {
		t.RolloutLogprobs[i] = -float32(r.ExpFloat64() * 0.7)
	}
	temp := float32(1)
	t.Temperature = &temp
	return t
}

// longGroup is a LAPO group of five trajectories of about n tokens (Δ per
// search turn), scored, with its members and results computed by the
// advantage stage's own code.
func longGroup(tb testing.TB, n int) ([]*schemas.Scored, []credit.Member, []credit.Result, credit.Config) {
	tb.Helper()
	r := rand.New(rand.NewPCG(uint64(n), 5))
	cfg := credit.DefaultConfig()
	var scs []*schemas.Scored
	var cms []credit.Member
	for i := 0; i < 5; i++ {
		t := longTrajectory(n, uint64(n), i)
		if i%2 == 1 {
			wrong := "lyon"
			t.PredAnswer = &wrong
		}
		sc := &schemas.Scored{Trajectory: t, Method: string(credit.MethodLAPO), Direction: string(Backward), Turns: make([]schemas.TurnScore, len(t.Turns)),
			ScorerModel: "qwen2.5-7b", ScorerPolicyVersion: 3, ScoredAtMs: 1_767_225_700_000}
		for k, tu := range t.Turns {
			if tu.Kind == schemas.KindSearch {
				with, without := -r.Float64()*3, -r.Float64()*3
				d := with - without
				sc.Turns[k] = schemas.TurnScore{Delta: &d, With: &with, Without: &without}
			}
		}
		scs = append(scs, sc)
		cms = append(cms, member(sc))
	}
	res, err := credit.ComputeGroup(cms, false, cfg, &credit.EMA{})
	if err != nil {
		tb.Fatal(err)
	}
	return scs, cms, res, cfg
}

// longRecords encodes a group's first trajectory, its scored record and its
// sample (longGroup).
func longRecords(tb testing.TB, n int) (traj, scored, smpBytes []byte) {
	tb.Helper()
	scs, cms, res, cfg := longGroup(tb, n)
	smp := sample(scs[0], cms[0], res[0], cfg, nil)
	var e error
	traj, e = schemas.Trajectories().Encode(&scs[0].Trajectory)
	if e != nil {
		tb.Fatal(e)
	}
	if scored, e = schemas.ScoredRecords().Encode(scs[0]); e != nil {
		tb.Fatal(e)
	}
	if smpBytes, e = schemas.Samples().Encode(&smp); e != nil {
		tb.Fatal(e)
	}
	return traj, scored, smpBytes
}

// BenchmarkCompression measures kafka-go's producer codecs on creditflow's
// records: search-QA (~1.3k tokens), 32k and 128k tokens; trajectory,
// scored and sample. Metrics: ratio (compressed/raw bytes), MB/s of raw
// bytes (encode and decode), and the record's raw size.
//
// cpu_ms/MB is the process's CPU time per MB of raw bytes (steadier than
// wall time on a shared machine; it includes the garbage collector's work).
//
//	go test ./processors/stage -run '^$' -bench Compression -benchtime 500ms
func BenchmarkCompression(b *testing.B) {
	codecs := []kafka.Compression{kafka.Zstd, kafka.Lz4, kafka.Snappy, kafka.Gzip}
	for _, size := range []struct {
		name string
		n    int
	}{{"searchqa", 1300}, {"32k", 32768}, {"128k", 131072}} {
		traj, scored, smp := longRecords(b, size.n)
		for _, rec := range []struct {
			name string
			v    []byte
		}{{"trajectory", traj}, {"scored", scored}, {"sample", smp}} {
			for _, c := range codecs {
				codec := c.Codec()
				var packed bytes.Buffer
				w := codec.NewWriter(&packed)
				if _, err := w.Write(rec.v); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				ratio := float64(packed.Len()) / float64(len(rec.v))
				name := fmt.Sprintf("%s/%s/%s", size.name, rec.name, codec.Name())
				b.Run(name+"/encode", func(b *testing.B) {
					b.SetBytes(int64(len(rec.v)))
					var out bytes.Buffer
					cpu := cpuTime()
					for i := 0; i < b.N; i++ {
						out.Reset()
						w := codec.NewWriter(&out)
						_, _ = w.Write(rec.v)
						_ = w.Close()
					}
					b.ReportMetric((cpuTime()-cpu).Seconds()*1e3/(float64(b.N)*float64(len(rec.v))/1e6), "cpu_ms/MB")
					b.ReportMetric(ratio, "ratio")
					b.ReportMetric(float64(len(rec.v)), "raw_bytes")
				})
				b.Run(name+"/decode", func(b *testing.B) {
					b.SetBytes(int64(len(rec.v)))
					cpu := cpuTime()
					for i := 0; i < b.N; i++ {
						rd := codec.NewReader(bytes.NewReader(packed.Bytes()))
						n, err := io.Copy(io.Discard, rd)
						_ = rd.Close()
						if err != nil || int(n) != len(rec.v) {
							b.Fatalf("decoded %d bytes (%v), want %d", n, err, len(rec.v))
						}
					}
					b.ReportMetric((cpuTime()-cpu).Seconds()*1e3/(float64(b.N)*float64(len(rec.v))/1e6), "cpu_ms/MB")
					b.ReportMetric(ratio, "ratio")
				})
			}
		}
	}
}

// cpuTime is the CPU time (user + system) this process has used: on a
// shared machine it is steadier than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLongRecordSizes pins the sizes the docs quote for long trajectories:
// a 128k-token sample is past Kafka's default 1 MiB message limit.
func TestLongRecordSizes(t *testing.T) {
	traj, scored, smp := longRecords(t, 131072)
	t.Logf("128k tokens: trajectory %d, scored %d, sample %d bytes", len(traj), len(scored), len(smp))
	if len(smp) < 1<<20 || len(smp) > 2<<20 {
		t.Fatalf("128k-token sample is %d bytes; want between 1 and 2 MiB (≈ 13 bytes per token)", len(smp))
	}
	if len(scored) < len(traj) {
		t.Fatalf("scored record (%d bytes) smaller than its trajectory (%d)", len(scored), len(traj))
	}
}

// BenchmarkLz4Batch compresses a produce batch of 50 search-QA samples
// (1.05 MB) with kafka-go's own lz4 codec (4 MiB blocks) and with the one
// the producers package installs in its place (64 KiB blocks, what Kafka's
// Java producer writes). cpu_ms/MB as in BenchmarkCompression.
//
//	go test ./processors/stage -run '^$' -bench Lz4Batch
func BenchmarkLz4Batch(b *testing.B) {
	var batch []byte
	for i := 0; i < 50; i++ {
		_, _, smp := longRecords(b, 1300+i)
		batch = append(batch, smp...)
	}
	for _, c := range []struct {
		name  string
		codec compress.Codec
	}{{"kafka-go", &compress.Lz4Codec}, {"installed", kafka.Lz4.Codec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			var out bytes.Buffer
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				out.Reset()
				w := c.codec.NewWriter(&out)
				_, _ = w.Write(batch)
				_ = w.Close()
			}
			b.ReportMetric((cpuTime()-cpu).Seconds()*1e3/(float64(b.N)*float64(len(batch))/1e6), "cpu_ms/MB")
			b.ReportMetric(float64(out.Len())/float64(len(batch)), "ratio")
			back, err := io.ReadAll(c.codec.NewReader(bytes.NewReader(out.Bytes())))
			if err != nil || !bytes.Equal(back, batch) {
				b.Fatalf("round trip: %v", err)
			}
		})
	}
}
