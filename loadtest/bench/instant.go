package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
	"github.com/rs/zerolog"
)

// benchInstantScorer is a benchmark fixture of the bench command and is used
// nowhere else: it answers the scorer protocol at once with deterministic
// values computed from the request's shape (no model), so that the score
// stage's own cost — planning rows, the protocol client, encoding scored
// records, Kafka I/O — is what the bench measures. Its numbers mean nothing
// for training.
type benchInstantScorer struct{ info scorer.ModelInfo }

func newBenchInstantScorer() benchInstantScorer {
	return benchInstantScorer{info: scorer.ModelInfo{
		Protocol: protocol.Version, Name: "bench-instant-scorer", Architecture: "none",
		Layers: 28, VocabSize: benchVocabSize, MaxContext: 1 << 20,
		PlaceholderIDs: synth.Tokens("[DELETE]"),
	}}
}

func (s benchInstantScorer) Info(context.Context) (scorer.ModelInfo, error) { return s.info, nil }

// ScoreRows gives each row a mean log-probability in [-3, -1) that depends
// only on the row's lengths and span; it counts no usage.
func (s benchInstantScorer) ScoreRows(_ context.Context, sets []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	out := make([]scorer.RowScores, len(sets))
	for i, set := range sets {
		out[i].Scores = make([]float64, len(set.Rows))
		for j, r := range set.Rows {
			h := (set.ContextLen(j)*31 + len(r.Target)*7 + r.Span[0]*3 + r.Span[1]) % 97
			out[i].Scores[j] = -1 - float64(h)/48.5
		}
	}
	return out, scorer.Usage{}, nil
}

// Attention answers the graphs of stepGraphs in the form opts asks for, of
// an unknown policy version.
func (s benchInstantScorer) Attention(_ context.Context, jobs []scorer.AttentionJob, opts scorer.AttentionOptions) (scorer.AttentionResult, error) {
	return scorer.NewAttentionResult(opts, stepGraphs(jobs), -1), nil
}

// stepGraphs gives step graphs whose row j spreads its mass over the earlier
// steps with a fixed, layer-dependent tilt, perturbed per trajectory (seeded
// by the job's id) in every bit of the mantissa: a real model's attention
// masses are full float64s that lz4 cannot shorten, and graphs of round
// values, the same for every trajectory, would let the scored records
// compress where real ones do not. A job's graphs share one allocation, and
// each entry costs one draw of the PCG source itself (not through
// rand.Rand's Float64) and no division: a GPU pod computes its graphs on its
// own machine, and the fixture's share of the cores the bench runs on is
// kept small (docs/performance-passes.md, "a cheaper AttnSR fixture").
func stepGraphs(jobs []scorer.AttentionJob) [][]scorer.StepGraph {
	out := make([][]scorer.StepGraph, len(jobs))
	for i, job := range jobs {
		k := len(job.Steps)
		h := fnv.New64a()
		h.Write([]byte(job.ID))
		src := rand.NewPCG(h.Sum64(), uint64(len(job.Tokens)))
		flat := make([]float64, 2*k*k*len(job.Layers))
		rows := make([][]float64, 2*k*len(job.Layers))
		out[i] = make([]scorer.StepGraph, len(job.Layers))
		for l, layer := range job.Layers {
			lf, lr := flat[2*k*k*l:2*k*k*(l+1)], rows[2*k*l:2*k*(l+1)]
			g := scorer.StepGraph{Layer: layer, AA: lr[:k:k], AO: lr[k:]}
			for j := 0; j < k; j++ {
				g.AA[j] = lf[2*j*k : (2*j+1)*k : (2*j+1)*k]
				g.AO[j] = lf[(2*j+1)*k : (2*j+2)*k : (2*j+2)*k]
				if j == 0 {
					continue
				}
				inv := 1 / float64(j)
				tilt := (j*7 + layer) % 5 // (j·7 + c·3 + layer) mod 5, stepped by 3 per column
				for c := 0; c < j; c++ {
					// 0.05 · a uniform draw in [0, 1) from the top 53 bits
					w := instantTilt[tilt] + 0.05*float64(src.Uint64()>>11)*0x1p-53
					g.AA[j][c] = 0.5 * w * inv
					g.AO[j][c] = 0.3 * w * inv
					if tilt += 3; tilt >= 5 {
						tilt -= 5
					}
				}
			}
			out[i][l] = g
		}
	}
	return out
}

// instantTilt is 1 + t/10 for the five tilts t of the fixture's graphs.
var instantTilt = [5]float64{1, 1.1, 1.2, 1.3, 1.4}

// ScorerCmd is the command (of this executable: its main dispatches it to
// ServeScorer) that serves the fixture over the scorer protocol in a child
// process of the bench, so that its CPU (decoding requests, which a GPU pod
// does on its own machine) is not counted as the score stage's.
const ScorerCmd = "bench-scorer"

// ServeScorer serves the instant scorer until SIGINT or SIGTERM, printing its
// address first.
func ServeScorer(args []string) (int, error) {
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	if len(args) == 2 && args[0] == "--cpuprofile" {
		stopProfile, err := startCPUProfile(args[1])
		if err != nil {
			return 1, err
		}
		defer stopProfile()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1, err
	}
	fmt.Println(ln.Addr().String())
	srv := server.New(newBenchInstantScorer(), server.WithLogger(zerolog.Nop()))
	if err := srv.Serve(ctx, ln); err != nil {
		return 1, err
	}
	return 0, nil
}

// startInstantScorer starts the fixture in a child process and returns a
// protocol client for it (the client the stage uses in production), and a
// stop function. With a non-empty cpuProfile the child writes its CPU
// profile there.
func startInstantScorer(ctx context.Context, cpuProfile string) (*client.Client, func(), error) {
	args := []string{ScorerCmd}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	cmd, addr, err := startChild("instant scorer", args...)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New([]string{"http://" + addr}, client.WithLogger(zerolog.Nop()))
	if err != nil {
		stopChild(cmd)
		return nil, nil, err
	}
	return c, func() { c.Close(); stopChild(cmd) }, nil
}
