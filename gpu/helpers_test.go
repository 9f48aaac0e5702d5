package gpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/gpu/model"
)

var (
	tinyOnce sync.Once
	tinyM    *model.Model
)

func tiny() *model.Model {
	tinyOnce.Do(func() { tinyM = model.Tiny() })
	return tinyM
}

func randText(r *rand.Rand, n int) []int32 {
	const letters = "abcdefghijklmnopqrstuvwxyz      .,?"
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(letters[r.IntN(len(letters))])
	}
	return out
}

// lapoSet builds the LAPO backward rows of one synthetic trajectory: c_full
// and one c_-t per turn, all followed by the same target template.
func lapoSet(r *rand.Rand, id string, prompt []int32, turns int) RowSet {
	var segs [][]int32
	for t := 0; t < turns; t++ {
		segs = append(segs, randText(r, 20+r.IntN(30)))
	}
	gold := randText(r, 3+r.IntN(6))
	target := append(append(model.TinyTokens("<think>enough</think>\n<answer>"), gold...), model.TinyTokens("</answer>")...)
	a := len(model.TinyTokens("<think>enough</think>\n<answer>"))
	span := [2]int{a, a + len(gold)}
	build := func(skip int) []int32 {
		ctx := append([]int32(nil), prompt...)
		for t, s := range segs {
			if t == skip {
				ctx = append(ctx, model.TinyDelete)
				continue
			}
			ctx = append(ctx, s...)
		}
		return ctx
	}
	set := RowSet{ID: id}
	set.Rows = append(set.Rows, Row{Context: build(-1), Target: target, Span: span})
	for t := range segs {
		set.Rows = append(set.Rows, Row{Context: build(t), Target: target, Span: span})
	}
	return set
}

// makeSets builds n trajectories; every groupSize of them share a prompt.
func makeSets(seed uint64, n, groupSize int) []RowSet {
	r := rand.New(rand.NewPCG(seed, 7))
	var prompt []int32
	sets := make([]RowSet, n)
	for i := range sets {
		if i%groupSize == 0 {
			prompt = randText(r, 40+r.IntN(40))
		}
		sets[i] = lapoSet(r, fmt.Sprintf("traj-%d", i), prompt, 1+r.IntN(3))
	}
	return sets
}

// makeJobs builds n AttnSR jobs with 2..4 steps on the tiny model's layers.
func makeJobs(seed uint64, n int) []AttentionJob {
	r := rand.New(rand.NewPCG(seed, 11))
	jobs := make([]AttentionJob, n)
	for i := range jobs {
		toks := randText(r, 30)
		var steps []Step
		k := 2 + r.IntN(3)
		for s := 0; s < k; s++ {
			a0 := len(toks)
			toks = append(toks, randText(r, 10+r.IntN(10))...)
			st := Step{Action: [2]int{a0, len(toks)}}
			if s < k-1 && r.IntN(4) > 0 {
				o0 := len(toks)
				toks = append(toks, randText(r, 5+r.IntN(15))...)
				st.Observation = [2]int{o0, len(toks)}
			}
			steps = append(steps, st)
		}
		jobs[i] = AttentionJob{ID: fmt.Sprintf("job-%d", i), Tokens: toks, Steps: steps, Layers: []int{0, 1}}
	}
	return jobs
}

// expectedScores scores each set alone, straight on the model.
func expectedScores(t testing.TB, sets []RowSet) []RowScores {
	t.Helper()
	out := make([]RowScores, len(sets))
	for i, s := range sets {
		sc, u, err := tiny().ScoreRows(s.Rows)
		if err != nil {
			t.Fatalf("model.ScoreRows(set %d): %v", i, err)
		}
		out[i] = RowScores{Scores: sc, Truncations: int(u.Truncations)}
	}
	return out
}

func expectedGraphs(t testing.TB, jobs []AttentionJob) [][]StepGraph {
	t.Helper()
	out := make([][]StepGraph, len(jobs))
	for i, j := range jobs {
		g, err := tiny().StepGraphs(j.Tokens, j.Steps, j.Layers)
		if err != nil {
			t.Fatalf("model.StepGraphs(job %d): %v", i, err)
		}
		out[i] = g
	}
	return out
}

func equalScores(t testing.TB, what string, got, want []RowScores) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Truncations != want[i].Truncations || len(got[i].Scores) != len(want[i].Scores) {
			t.Fatalf("%s: set %d = %+v, want %+v", what, i, got[i], want[i])
		}
		for j := range want[i].Scores {
			if got[i].Scores[j] != want[i].Scores[j] {
				t.Fatalf("%s: set %d row %d score %v, want %v (exactly)", what, i, j, got[i].Scores[j], want[i].Scores[j])
			}
		}
	}
}

func equalGraphs(t testing.TB, what string, got, want [][]StepGraph) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: job %d has %d graphs, want %d", what, i, len(got[i]), len(want[i]))
		}
		for l := range want[i] {
			g, w := got[i][l], want[i][l]
			if g.Layer != w.Layer {
				t.Fatalf("%s: job %d graph %d layer %d, want %d", what, i, l, g.Layer, w.Layer)
			}
			for _, pair := range [][2][][]float64{{g.AA, w.AA}, {g.AO, w.AO}} {
				if len(pair[0]) != len(pair[1]) {
					t.Fatalf("%s: job %d layer %d: %d rows, want %d", what, i, w.Layer, len(pair[0]), len(pair[1]))
				}
				for r := range pair[1] {
					for c := range pair[1][r] {
						if pair[0][r][c] != pair[1][r][c] {
							t.Fatalf("%s: job %d layer %d [%d][%d] = %v, want %v", what, i, w.Layer, r, c, pair[0][r][c], pair[1][r][c])
						}
					}
				}
			}
		}
	}
}

// serveHandler serves h on a fresh 127.0.0.1 port until the test ends or
// stop is called.
func serveHandler(t testing.TB, h http.Handler) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(ctx)
			hs.Close()
		})
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// serveScorer runs a real Server (Serve with graceful shutdown) on a fresh port.
func serveScorer(t testing.TB, s *Server) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// counter wraps a handler and counts the work requests reaching it.
type counter struct {
	h                http.Handler
	score, attention atomic.Int64
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathScore:
		c.score.Add(1)
	case PathAttention:
		c.attention.Add(1)
	}
	c.h.ServeHTTP(w, r)
}

func newClient(t testing.TB, urls []string, opts ...ClientOption) *Client {
	t.Helper()
	c, err := NewClient(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func asRejected(err error) (*RejectedError, bool) {
	var rej *RejectedError
	ok := errors.As(err, &rej)
	return rej, ok
}
