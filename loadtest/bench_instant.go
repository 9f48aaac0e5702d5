package main

import (
	"context"
	"net"
	"runtime/pprof"

	"github.com/creditflow/creditflow/gpu"
	"github.com/creditflow/creditflow/internal/synth"
)

// benchInstantScorer is a benchmark fixture of the bench command and is used
// nowhere else: it answers the scorer protocol at once with deterministic
// values computed from the request's shape (no model), so that the score
// stage's own cost — planning rows, the protocol client, encoding scored
// records, Kafka I/O — is what the bench measures. Its numbers mean nothing
// for training.
type benchInstantScorer struct{ info gpu.ModelInfo }

func newBenchInstantScorer() benchInstantScorer {
	return benchInstantScorer{info: gpu.ModelInfo{
		Protocol: gpu.ProtocolVersion, Name: "bench-instant-scorer", Architecture: "none",
		Layers: 28, VocabSize: 151936, MaxContext: 1 << 20,
		PlaceholderIDs: synth.Tokens("[DELETE]"),
	}}
}

func (s benchInstantScorer) Info(context.Context) (gpu.ModelInfo, error) { return s.info, nil }

// ScoreRows gives each row a mean log-probability in [-3, -1) that depends
// only on the row's lengths and span.
func (s benchInstantScorer) ScoreRows(_ context.Context, sets []gpu.RowSet) ([]gpu.RowScores, error) {
	out := make([]gpu.RowScores, len(sets))
	for i, set := range sets {
		out[i].Scores = make([]float64, len(set.Rows))
		for j, r := range set.Rows {
			h := (len(r.Context)*31 + len(r.Target)*7 + r.Span[0]*3 + r.Span[1]) % 97
			out[i].Scores[j] = -1 - float64(h)/48.5
		}
	}
	return out, nil
}

// Attention gives step graphs whose row j spreads its mass over the earlier
// steps with a fixed, layer-dependent tilt.
func (s benchInstantScorer) Attention(_ context.Context, jobs []gpu.AttentionJob) ([][]gpu.StepGraph, error) {
	out := make([][]gpu.StepGraph, len(jobs))
	for i, job := range jobs {
		k := len(job.Steps)
		for _, layer := range job.Layers {
			g := gpu.StepGraph{Layer: layer, AA: make([][]float64, k), AO: make([][]float64, k)}
			for j := 0; j < k; j++ {
				g.AA[j] = make([]float64, k)
				g.AO[j] = make([]float64, k)
				for c := 0; c < j; c++ {
					w := 1 + float64((j*7+c*3+layer)%5)/10
					g.AA[j][c] = 0.5 * w / float64(j)
					g.AO[j][c] = 0.3 * w / float64(j)
				}
			}
			out[i] = append(out[i], g)
		}
	}
	return out, nil
}

// startInstantScorer serves the fixture over the scorer protocol on loopback
// and returns a protocol client for it (the client the stage uses in
// production), and a stop function.
func startInstantScorer(ctx context.Context) (*gpu.Client, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	srv := gpu.NewServer(newBenchInstantScorer(), gpu.WithServerLogger(nopLog()))
	done := make(chan struct{})
	go pprof.Do(ctx, pprof.Labels("phase", "instant-scorer"), func(ctx context.Context) { defer close(done); _ = srv.Serve(ctx, ln) })
	client, err := gpu.NewClient([]string{"http://" + ln.Addr().String()}, gpu.WithLogger(nopLog()))
	if err != nil {
		cancel()
		<-done
		return nil, nil, err
	}
	return client, func() { client.Close(); cancel(); <-done }, nil
}
