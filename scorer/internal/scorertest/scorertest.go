// Package scorertest holds what the scorer layer's tests share: the tiny
// model, synthetic LAPO row sets and AttnSR jobs, the answers the model
// itself gives them, exact comparisons, and HTTP servers on fresh ports.
package scorertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/protocol"
)

var (
	tinyOnce sync.Once
	tinyM    *cpumodel.Model
)

// Tiny is the built-in tiny model, loaded once.
func Tiny() *cpumodel.Model {
	tinyOnce.Do(func() { tinyM = cpumodel.Tiny() })
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
func lapoSet(r *rand.Rand, id string, prompt []int32, turns int) scorer.RowSet {
	var segs [][]int32
	for t := 0; t < turns; t++ {
		segs = append(segs, randText(r, 20+r.IntN(30)))
	}
	gold := randText(r, 3+r.IntN(6))
	target := append(append(cpumodel.TinyTokens("<think>enough</think>\n<answer>"), gold...), cpumodel.TinyTokens("</answer>")...)
	a := len(cpumodel.TinyTokens("<think>enough</think>\n<answer>"))
	span := [2]int{a, a + len(gold)}
	build := func(skip int) []int32 {
		ctx := append([]int32(nil), prompt...)
		for t, s := range segs {
			if t == skip {
				ctx = append(ctx, cpumodel.TinyDelete)
				continue
			}
			ctx = append(ctx, s...)
		}
		return ctx
	}
	set := scorer.RowSet{ID: id}
	set.Rows = append(set.Rows, scorer.Row{Context: build(-1), Target: target, Span: span})
	for t := range segs {
		set.Rows = append(set.Rows, scorer.Row{Context: build(t), Target: target, Span: span})
	}
	return set
}

// MakeSets builds n trajectories; every groupSize of them share a prompt.
func MakeSets(seed uint64, n, groupSize int) []scorer.RowSet {
	r := rand.New(rand.NewPCG(seed, 7))
	var prompt []int32
	sets := make([]scorer.RowSet, n)
	for i := range sets {
		if i%groupSize == 0 {
			prompt = randText(r, 40+r.IntN(40))
		}
		sets[i] = lapoSet(r, fmt.Sprintf("traj-%d", i), prompt, 1+r.IntN(3))
	}
	return sets
}

// MakeJobs builds n AttnSR jobs with 2..4 steps on the tiny model's layers.
func MakeJobs(seed uint64, n int) []scorer.AttentionJob {
	r := rand.New(rand.NewPCG(seed, 11))
	jobs := make([]scorer.AttentionJob, n)
	for i := range jobs {
		toks := randText(r, 30)
		var steps []scorer.Step
		k := 2 + r.IntN(3)
		for s := 0; s < k; s++ {
			a0 := len(toks)
			toks = append(toks, randText(r, 10+r.IntN(10))...)
			st := scorer.Step{Action: [2]int{a0, len(toks)}}
			if s < k-1 && r.IntN(4) > 0 {
				o0 := len(toks)
				toks = append(toks, randText(r, 5+r.IntN(15))...)
				st.Observation = [2]int{o0, len(toks)}
			}
			steps = append(steps, st)
		}
		jobs[i] = scorer.AttentionJob{ID: fmt.Sprintf("job-%d", i), Tokens: toks, Steps: steps, Layers: []int{0, 1}}
	}
	return jobs
}

// ExpectedScores scores each set alone, straight on the model.
func ExpectedScores(t testing.TB, sets []scorer.RowSet) []scorer.RowScores {
	t.Helper()
	out := make([]scorer.RowScores, len(sets))
	for i, s := range sets {
		sc, u, err := Tiny().ScoreRows(s.Rows)
		if err != nil {
			t.Fatalf("cpumodel.ScoreRows(set %d): %v", i, err)
		}
		out[i] = scorer.RowScores{Scores: sc, Truncations: int(u.Truncations)}
	}
	return out
}

// ExpectedGraphs computes each job alone, straight on the model.
func ExpectedGraphs(t testing.TB, jobs []scorer.AttentionJob) [][]scorer.StepGraph {
	t.Helper()
	out := make([][]scorer.StepGraph, len(jobs))
	for i, j := range jobs {
		g, err := Tiny().StepGraphs(j.Tokens, j.Steps, j.Layers)
		if err != nil {
			t.Fatalf("cpumodel.StepGraphs(job %d): %v", i, err)
		}
		out[i] = g
	}
	return out
}

// EqualScores fails t unless got equals want exactly (no tolerance).
func EqualScores(t testing.TB, what string, got, want []scorer.RowScores) {
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

// eachGraph calls check on every pair of graphs of got and want, job by
// job, after failing t where their numbers of jobs or graphs differ.
func eachGraph[G any](t testing.TB, what string, got, want [][]G, check func(job, graph int, g, w G)) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: job %d has %d graphs, want %d", what, i, len(got[i]), len(want[i]))
		}
		for l := range want[i] {
			check(i, l, got[i][l], want[i][l])
		}
	}
}

// EqualGraphs fails t unless got equals want exactly.
func EqualGraphs(t testing.TB, what string, got, want [][]scorer.StepGraph) {
	t.Helper()
	eachGraph(t, what, got, want, func(i, l int, g, w scorer.StepGraph) {
		t.Helper()
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
	})
}

// SameLower reports whether a and b are the same lower graph, form and
// every value bit for bit (so -0 and NaN compare exactly).
func SameLower(a, b scorer.LowerGraph) bool {
	same := func(x, y []float64) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
				return false
			}
		}
		return true
	}
	return a.Layer == b.Layer && a.K == b.K && a.Summed() == b.Summed() &&
		same(a.AA, b.AA) && same(a.AO, b.AO) && same(a.Sum, b.Sum)
}

// EqualLowerGraphs fails t unless got equals want bit for bit (SameLower).
func EqualLowerGraphs(t testing.TB, what string, got, want [][]scorer.LowerGraph) {
	t.Helper()
	eachGraph(t, what, got, want, func(i, l int, g, w scorer.LowerGraph) {
		t.Helper()
		if !SameLower(g, w) {
			t.Fatalf("%s: job %d graph %d\n got %+v\nwant %+v", what, i, l, g, w)
		}
	})
}

// ServeHandler serves h on a fresh 127.0.0.1 port until the test ends or
// stop is called.
func ServeHandler(t testing.TB, h http.Handler) (url string, stop func()) {
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

// Server is what Serve runs: a scorer server (server.Server).
type Server interface {
	Serve(ctx context.Context, ln net.Listener) error
}

// Serve runs a real server (Serve with graceful shutdown) on a fresh port.
func Serve(t testing.TB, s Server) (url string, stop func()) {
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

// WaitFor polls cond until it holds, failing t after 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AsRejected finds the *scorer.RejectedError in err.
func AsRejected(err error) (*scorer.RejectedError, bool) {
	var rej *scorer.RejectedError
	ok := errors.As(err, &rej)
	return rej, ok
}

// CompactOf rewrites a set in the compact form: the first row's context is
// the set's tokens, and every row is the longest prefix and suffix it shares
// with them as spans around literal ids.
func CompactOf(s scorer.RowSet) scorer.RowSet {
	base := s.Rows[0].Context
	out := scorer.RowSet{ID: s.ID, Tokens: base, Pieces: make([][]scorer.Piece, len(s.Rows))}
	for j, r := range s.Rows {
		c := r.Context
		p := 0
		for p < len(c) && p < len(base) && c[p] == base[p] {
			p++
		}
		q := 0
		for q < len(c)-p && q < len(base)-p && c[len(c)-1-q] == base[len(base)-1-q] {
			q++
		}
		ps := []scorer.Piece{{Start: 0, End: p}}
		if mid := c[p : len(c)-q]; len(mid) > 0 {
			ps = append(ps, scorer.Piece{Literal: append(scorer.Tokens{}, mid...)})
		}
		if q > 0 {
			ps = append(ps, scorer.Piece{Start: len(base) - q, End: len(base)})
		}
		out.Pieces[j] = ps
		r.Context = nil
		out.Rows = append(out.Rows, r)
	}
	return out
}

// Gated wraps a real scorer and holds every ScoreRows call until Gate
// closes; each call first tries to send on Entered.
type Gated struct {
	scorer.Scorer
	Gate    chan struct{}
	Entered chan struct{}
}

// ScoreRows waits for Gate, then scores.
func (g *Gated) ScoreRows(ctx context.Context, sets []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	select {
	case g.Entered <- struct{}{}:
	default:
	}
	select {
	case <-g.Gate:
	case <-ctx.Done():
		return nil, scorer.Usage{}, ctx.Err()
	}
	return g.Scorer.ScoreRows(ctx, sets)
}

// Get sends a GET and fails t unless the answer has wantStatus; it returns
// the body.
func Get(t testing.TB, url string, wantStatus int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s = %d %s, want %d", url, resp.StatusCode, b, wantStatus)
	}
	return string(b)
}

// Post sends a raw protocol request and returns the status and error body.
func Post(t testing.TB, url string, header map[string]string, body []byte) (int, protocol.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb protocol.ErrorBody
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		if err := json.Unmarshal(data, &eb); err != nil || eb.Code == "" || eb.Error == "" {
			t.Fatalf("status %d with body %q: not a protocol error body", resp.StatusCode, data)
		}
	}
	return resp.StatusCode, eb
}

// Graphs is the K×K graphs of an Attention call and its error, for calls
// that want only them: Graphs(s.Attention(ctx, jobs, scorer.AttentionOptions{})).
func Graphs(res scorer.AttentionResult, err error) ([][]scorer.StepGraph, error) {
	return res.Graphs, err
}
