package scorer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestClientMatchesLocalAndModel(t *testing.T) {
	local := local.New(scorertest.Tiny())
	url, _ := scorertest.Serve(t, server.New(local))
	c := newClient(t, []string{url})
	ctx := context.Background()

	sets := scorertest.MakeSets(5, 20, 5)
	want := scorertest.ExpectedScores(t, sets)
	fromLocal, _, err := local.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "Local vs model", fromLocal, want)
	got, _, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "client batch vs model", got, want)
	for i, s := range sets {
		one, _, err := c.ScoreRows(ctx, []scorer.RowSet{s})
		if err != nil {
			t.Fatal(err)
		}
		scorertest.EqualScores(t, "client one set", one, want[i:i+1])
	}

	jobs := scorertest.MakeJobs(6, 8)
	wantG := scorertest.ExpectedGraphs(t, jobs)
	gotG, err := scorertest.Graphs(c.Attention(ctx, jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualGraphs(t, "client attention vs model", gotG, wantG)
	localG, _ := scorertest.Graphs(local.Attention(ctx, jobs, scorer.AttentionOptions{}))
	scorertest.EqualGraphs(t, "Local attention vs model", localG, wantG)

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := local.Info(ctx)
	if !info.SameModel(li) || info.Protocol != protocol.Version {
		t.Fatalf("client Info %+v, local %+v", info, li)
	}
	// A caller larger than the budget is split into several requests and
	// still gets its results in order.
	small := newClient(t, []string{url}, client.WithTokenBudget(600))
	got, _, err = small.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "client with small budget", got, want)
	if st := small.Stats(); st.Requests < 2 {
		t.Fatalf("20 sets over a 600-token budget went in %d requests, want several", st.Requests)
	}
}

func TestClientCoalescesConcurrentCallers(t *testing.T) {
	cnt := &counter{h: server.New(local.New(scorertest.Tiny())).Handler()}
	url, _ := scorertest.ServeHandler(t, cnt)
	reg := prometheus.NewRegistry()
	c := newClient(t, []string{url}, client.WithRegisterer(reg))
	const callers = 50
	sets := scorertest.MakeSets(8, callers, 5)
	want := scorertest.ExpectedScores(t, sets)
	jobs := scorertest.MakeJobs(9, callers)
	wantG := scorertest.ExpectedGraphs(t, jobs)
	var wg sync.WaitGroup
	errs := make(chan error, 2*callers)
	for i := 0; i < callers; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			got, _, err := c.ScoreRows(context.Background(), sets[i:i+1])
			if err != nil {
				errs <- err
				return
			}
			scorertest.EqualScores(t, "coalesced caller", got, want[i:i+1])
		}()
		go func() {
			defer wg.Done()
			got, err := scorertest.Graphs(c.Attention(context.Background(), jobs[i:i+1], scorer.AttentionOptions{}))
			if err != nil {
				errs <- err
				return
			}
			scorertest.EqualGraphs(t, "coalesced attention caller", got, wantG[i:i+1])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := cnt.score.Load(); n >= callers || n == 0 {
		t.Fatalf("%d score callers made %d requests; want fewer requests than callers", callers, n)
	}
	if n := cnt.attention.Load(); n >= callers || n == 0 {
		t.Fatalf("%d attention callers made %d requests; want fewer requests than callers", callers, n)
	}
	t.Logf("score: %d callers in %d requests; attention: %d callers in %d requests", callers, cnt.score.Load(), callers, cnt.attention.Load())
	// The client's metrics saw the same requests.
	metric := func(name string, labels map[string]string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return promreg.Sum(mfs, name, labels)
	}
	n := cnt.score.Load()
	if got := metric("creditflow_scorer_requests_total", map[string]string{"endpoint": url, "op": "score"}); got != float64(n) {
		t.Errorf("creditflow_scorer_requests_total{op=score} = %v, server saw %d", got, n)
	}
	if got := testutil.CollectAndCount(reg, "creditflow_scorer_request_duration_seconds"); got != 2 {
		t.Errorf("request duration series: %d, want 2 (score and attention on one endpoint)", got)
	}
	fwd := metric("creditflow_scorer_tokens_forwarded_total", nil)
	rbr := metric("creditflow_scorer_tokens_row_by_row_total", nil)
	if fwd <= 0 || fwd >= rbr {
		t.Errorf("tokens forwarded %v, row by row %v: want 0 < forwarded < row by row", fwd, rbr)
	}
	var rowByRow int
	for _, s := range sets {
		rowByRow += s.TokenCount()
	}
	if rbr != float64(rowByRow) {
		t.Errorf("row-by-row tokens %v, want %d", rbr, rowByRow)
	}
	if got := metric("creditflow_scorer_in_flight_requests", map[string]string{"endpoint": url}); got != 0 {
		t.Errorf("in-flight gauge %v after all calls returned", got)
	}
}

func TestServerMetricsAndHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	url, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny(), local.WithRegisterer(reg)), server.WithToken("s3cret"), server.WithRegistry(reg)))
	c := newClient(t, []string{url}, client.WithBearerToken("s3cret"))
	if _, _, err := c.ScoreRows(context.Background(), scorertest.MakeSets(1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	body := scorertest.Get(t, url+protocol.PathMetrics, 200)
	for _, want := range []string{`creditflow_scorer_server_requests_total{op="score",status="200"} 1`, "creditflow_scorer_server_request_duration_seconds_bucket",
		"creditflow_scorer_local_tokens_forwarded_total", `creditflow_scorer_server_items_total{op="score"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "s3cret") {
		t.Error("/metrics shows the token")
	}
	scorertest.Get(t, url+protocol.PathHealth, 200)
}

// shortModel is the tiny model with its context cut to n tokens, so that
// rows get truncated.
func shortModel(t *testing.T, n int) *cpumodel.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-short")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"] = n
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := cpumodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Info().MaxContext != n {
		t.Fatalf("max context %d, want %d", m.Info().MaxContext, n)
	}
	return m
}

func TestTruncationsPerSet(t *testing.T) {
	m := shortModel(t, 120)
	sets := scorertest.MakeSets(40, 10, 2)
	want := make([]scorer.RowScores, len(sets))
	total := 0
	for i, s := range sets {
		sc, u, err := m.ScoreRows(s.Rows)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = scorer.RowScores{Scores: sc, Truncations: int(u.Truncations)}
		total += want[i].Truncations
	}
	if total == 0 {
		t.Fatal("no row was long enough to be truncated; the test needs some")
	}
	local := local.New(m)
	got, usage, err := local.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "Local with truncation", got, want)
	if usage.Truncations != int64(total) {
		t.Fatalf("usage truncations %d, want %d", usage.Truncations, total)
	}
	url, _ := scorertest.Serve(t, server.New(local))
	got, _, err = newClient(t, []string{url}).ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "client with truncation", got, want)
}

// Rows carry the rollout temperature over the protocol ("temperature",
// absent = 1): the client's scores equal the model's at each row's
// temperature, a row without one is scored at 1, and a temperature that is
// not > 0 is a 400.
func TestTemperatureOnTheWire(t *testing.T) {
	local := local.New(scorertest.Tiny())
	url, _ := scorertest.Serve(t, server.New(local))
	c := newClient(t, []string{url})
	ctx := context.Background()
	sets := scorertest.MakeSets(9, 6, 3)
	for i := range sets {
		for j := range sets[i].Rows {
			sets[i].Rows[j].Temperature = []float64{0, 0.6, 1.3}[i%3]
		}
	}
	want := scorertest.ExpectedScores(t, sets)
	got, _, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "client with temperatures vs model", got, want)
	plain := scorertest.MakeSets(9, 6, 3)
	atOne := scorertest.ExpectedScores(t, plain)
	if got[1].Scores[0] == atOne[1].Scores[0] {
		t.Fatalf("a row at T = 0.6 scored %v, as at T = 1: the temperature did not reach the model", got[1].Scores[0])
	}
	h := map[string]string{protocol.Header: protocol.Version, "Content-Type": "application/json"}
	for _, temp := range []string{"0", "-0.5"} {
		body := fmt.Sprintf(`{"sets":[{"id":"s","rows":[{"context":"AQAAAAIAAAA=","target":"AwAAAAQAAAA=","span":[0,2],"temperature":%s}]}]}`, temp)
		st, eb := scorertest.Post(t, url+protocol.PathScore, h, []byte(body))
		if st != 400 || eb.Code != scorer.CodeBadRequest || !strings.Contains(eb.Error, "temperature") {
			t.Errorf("temperature %s: status %d %+v, want 400 bad_request naming the temperature", temp, st, eb)
		}
	}
	if _, _, err := local.ScoreRows(ctx, []scorer.RowSet{{ID: "neg", Rows: []scorer.Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{0, 1}, Temperature: -1}}}}); err == nil {
		t.Error("Local accepted a negative temperature")
	}
}
