package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/creditflow/creditflow/gpu/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestTokensWireFormat(t *testing.T) {
	b, err := json.Marshal(Tokens{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	// 01 00 00 00 02 00 00 00 in base64.
	if string(b) != `"AQAAAAIAAAA="` {
		t.Fatalf("Tokens{1,2} = %s, want \"AQAAAAIAAAA=\"", b)
	}
	in := Tokens{0, -1, 259, math.MaxInt32, math.MinInt32, 65536}
	b, _ = json.Marshal(in)
	var out Tokens
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("round trip length %d, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Fatalf("round trip [%d] = %d, want %d", i, out[i], in[i])
		}
	}
	for _, bad := range []string{`[1,2]`, `"AQAAAAI="`, `"!!!"`} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("Unmarshal(%s) accepted, want an error", bad)
		}
	}
	// Scores: non-finite travels as null and comes back as NaN.
	b, _ = json.Marshal([]Score{Score(-1.25), Score(math.Inf(-1)), Score(0.1)})
	if string(b) != `[-1.25,null,0.1]` {
		t.Fatalf("scores = %s", b)
	}
	var sc []Score
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	if sc[0] != -1.25 || !math.IsNaN(float64(sc[1])) || sc[2] != 0.1 {
		t.Fatalf("scores round trip = %v", sc)
	}
}

func TestLocalMatchesModel(t *testing.T) {
	sets := makeSets(1, 12, 4)
	want := expectedScores(t, sets)
	l := NewLocal(tiny(), WithPolicyVersion(7))
	got, usage, err := l.ScoreRowsUsage(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "Local batch vs model per set", got, want)
	if usage.TokensForwarded >= usage.TokensRowByRow {
		t.Errorf("prefix sharing: forwarded %d tokens, row by row %d; want fewer forwarded", usage.TokensForwarded, usage.TokensRowByRow)
	}
	var rowByRow int64
	for _, s := range sets {
		rowByRow += int64(rowsTokens(s))
	}
	if usage.TokensRowByRow != rowByRow {
		t.Errorf("row-by-row tokens %d, want %d", usage.TokensRowByRow, rowByRow)
	}
	info, _ := l.Info(context.Background())
	mi := tiny().Info()
	if info.Protocol != ProtocolVersion || info.PolicyVersion != 7 || info.Name != mi.Name || info.Layers != mi.Layers || info.VocabSize != mi.VocabSize {
		t.Errorf("Info = %+v, model %+v", info, mi)
	}
	jobs := makeJobs(2, 5)
	g, err := l.Attention(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	equalGraphs(t, "Local attention vs model", g, expectedGraphs(t, jobs))
}

func TestLocalRejectsInvalidInput(t *testing.T) {
	l := NewLocal(tiny())
	good := makeSets(3, 3, 3)
	cases := map[string]func(s *RowSet){
		"token out of vocabulary": func(s *RowSet) { s.Rows[0].Context[2] = model.TinyVocab },
		"negative token":          func(s *RowSet) { s.Rows[0].Target[0] = -1 },
		"span past target":        func(s *RowSet) { s.Rows[0].Span[1] = len(s.Rows[0].Target) + 1 },
		"empty span":              func(s *RowSet) { s.Rows[0].Span[1] = s.Rows[0].Span[0] },
		"no rows":                 func(s *RowSet) { s.Rows = nil },
	}
	for name, mutate := range cases {
		sets := makeSets(3, 3, 3)
		mutate(&sets[1])
		_, err := l.ScoreRows(context.Background(), sets)
		rej, ok := asRejected(err)
		if !ok {
			t.Errorf("%s: error %v, want *RejectedError", name, err)
			continue
		}
		if rej.Item != 1 || rej.ID != "traj-1" || rej.Code != CodeBadRequest {
			t.Errorf("%s: rejection %+v, want item 1 id traj-1", name, rej)
		}
	}
	if _, err := l.ScoreRows(context.Background(), good); err != nil {
		t.Fatalf("valid sets: %v", err)
	}
	jobs := makeJobs(4, 2)
	jobs[1].Layers = []int{5}
	if _, err := l.Attention(context.Background(), jobs); err == nil {
		t.Fatal("layer 5 of a 2-layer model accepted")
	} else if rej, ok := asRejected(err); !ok || rej.Item != 1 {
		t.Fatalf("bad layer: %v, want rejection of item 1", err)
	}
	jobs = makeJobs(4, 2)
	jobs[0].Steps[1].Action[0] = 0 // overlaps step 0
	if _, err := l.Attention(context.Background(), jobs); err == nil {
		t.Fatal("overlapping steps accepted")
	}
}

func TestClientMatchesLocalAndModel(t *testing.T) {
	local := NewLocal(tiny())
	url, _ := serveScorer(t, NewServer(local))
	c := newClient(t, []string{url})
	ctx := context.Background()

	sets := makeSets(5, 20, 5)
	want := expectedScores(t, sets)
	fromLocal, err := local.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "Local vs model", fromLocal, want)
	got, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "client batch vs model", got, want)
	for i, s := range sets {
		one, err := c.ScoreRows(ctx, []RowSet{s})
		if err != nil {
			t.Fatal(err)
		}
		equalScores(t, "client one set", one, want[i:i+1])
	}

	jobs := makeJobs(6, 8)
	wantG := expectedGraphs(t, jobs)
	gotG, err := c.Attention(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	equalGraphs(t, "client attention vs model", gotG, wantG)
	localG, _ := local.Attention(ctx, jobs)
	equalGraphs(t, "Local attention vs model", localG, wantG)

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := local.Info(ctx)
	if !sameModel(info, li) || info.Protocol != ProtocolVersion {
		t.Fatalf("client Info %+v, local %+v", info, li)
	}
	// A caller larger than the budget is split into several requests and
	// still gets its results in order.
	small := newClient(t, []string{url}, WithTokenBudget(600))
	got, err = small.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "client with small budget", got, want)
	if st := small.Stats(); st.Requests < 2 {
		t.Fatalf("20 sets over a 600-token budget went in %d requests, want several", st.Requests)
	}
}

func TestClientCoalescesConcurrentCallers(t *testing.T) {
	cnt := &counter{h: NewServer(NewLocal(tiny())).Handler()}
	url, _ := serveHandler(t, cnt)
	reg := prometheus.NewRegistry()
	c := newClient(t, []string{url}, WithRegisterer(reg))
	const callers = 50
	sets := makeSets(8, callers, 5)
	want := expectedScores(t, sets)
	jobs := makeJobs(9, callers)
	wantG := expectedGraphs(t, jobs)
	var wg sync.WaitGroup
	errs := make(chan error, 2*callers)
	for i := 0; i < callers; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			got, err := c.ScoreRows(context.Background(), sets[i:i+1])
			if err != nil {
				errs <- err
				return
			}
			equalScores(t, "coalesced caller", got, want[i:i+1])
		}()
		go func() {
			defer wg.Done()
			got, err := c.Attention(context.Background(), jobs[i:i+1])
			if err != nil {
				errs <- err
				return
			}
			equalGraphs(t, "coalesced attention caller", got, wantG[i:i+1])
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
	n := cnt.score.Load()
	if got := testutil.ToFloat64(c.metrics.requests.WithLabelValues(url, "score")); got != float64(n) {
		t.Errorf("creditflow_scorer_requests_total{op=score} = %v, server saw %d", got, n)
	}
	if got := testutil.CollectAndCount(reg, "creditflow_scorer_request_duration_seconds"); got != 2 {
		t.Errorf("request duration series: %d, want 2 (score and attention on one endpoint)", got)
	}
	fwd := testutil.ToFloat64(c.metrics.forwarded)
	rbr := testutil.ToFloat64(c.metrics.rowByRow)
	if fwd <= 0 || fwd >= rbr {
		t.Errorf("tokens forwarded %v, row by row %v: want 0 < forwarded < row by row", fwd, rbr)
	}
	var rowByRow int
	for _, s := range sets {
		rowByRow += rowsTokens(s)
	}
	if rbr != float64(rowByRow) {
		t.Errorf("row-by-row tokens %v, want %d", rbr, rowByRow)
	}
	if got := testutil.ToFloat64(c.metrics.inFlight.WithLabelValues(url)); got != 0 {
		t.Errorf("in-flight gauge %v after all calls returned", got)
	}
}

func TestServerMetricsAndHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	url, _ := serveScorer(t, NewServer(NewLocal(tiny(), WithLocalRegisterer(reg)), WithServerToken("s3cret"), WithServerRegistry(reg)))
	c := newClient(t, []string{url}, WithBearerToken("s3cret"))
	if _, err := c.ScoreRows(context.Background(), makeSets(1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	body := httpGet(t, url+PathMetrics, 200)
	for _, want := range []string{`creditflow_scorer_server_requests_total{op="score",status="200"} 1`, "creditflow_scorer_server_request_duration_seconds_bucket",
		"creditflow_scorer_local_tokens_forwarded_total", `creditflow_scorer_server_items_total{op="score"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "s3cret") {
		t.Error("/metrics shows the token")
	}
	httpGet(t, url+PathHealth, 200)
}

// shortModel is the tiny model with its context cut to n tokens, so that
// rows get truncated.
func shortModel(t *testing.T, n int) *model.Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-short")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := model.WriteTiny(dir); err != nil {
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
	m, err := model.Load(dir)
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
	sets := makeSets(40, 10, 2)
	want := make([]RowScores, len(sets))
	total := 0
	for i, s := range sets {
		sc, u, err := m.ScoreRows(s.Rows)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = RowScores{Scores: sc, Truncations: int(u.Truncations)}
		total += want[i].Truncations
	}
	if total == 0 {
		t.Fatal("no row was long enough to be truncated; the test needs some")
	}
	local := NewLocal(m)
	got, usage, err := local.ScoreRowsUsage(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "Local with truncation", got, want)
	if usage.Truncations != int64(total) {
		t.Fatalf("usage truncations %d, want %d", usage.Truncations, total)
	}
	url, _ := serveScorer(t, NewServer(local))
	got, err = newClient(t, []string{url}).ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "client with truncation", got, want)
}

// Rows carry the rollout temperature over the protocol ("temperature",
// absent = 1): the client's scores equal the model's at each row's
// temperature, a row without one is scored at 1, and a temperature that is
// not > 0 is a 400.
func TestTemperatureOnTheWire(t *testing.T) {
	local := NewLocal(tiny())
	url, _ := serveScorer(t, NewServer(local))
	c := newClient(t, []string{url})
	ctx := context.Background()
	sets := makeSets(9, 6, 3)
	for i := range sets {
		for j := range sets[i].Rows {
			sets[i].Rows[j].Temperature = []float64{0, 0.6, 1.3}[i%3]
		}
	}
	want := expectedScores(t, sets)
	got, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	equalScores(t, "client with temperatures vs model", got, want)
	plain := makeSets(9, 6, 3)
	atOne := expectedScores(t, plain)
	if got[1].Scores[0] == atOne[1].Scores[0] {
		t.Fatalf("a row at T = 0.6 scored %v, as at T = 1: the temperature did not reach the model", got[1].Scores[0])
	}
	h := map[string]string{ProtocolHeader: ProtocolVersion, "Content-Type": "application/json"}
	for _, temp := range []string{"0", "-0.5"} {
		body := fmt.Sprintf(`{"sets":[{"id":"s","rows":[{"context":"AQAAAAIAAAA=","target":"AwAAAAQAAAA=","span":[0,2],"temperature":%s}]}]}`, temp)
		st, eb := post(t, url+PathScore, h, []byte(body))
		if st != 400 || eb.Code != CodeBadRequest || !strings.Contains(eb.Error, "temperature") {
			t.Errorf("temperature %s: status %d %+v, want 400 bad_request naming the temperature", temp, st, eb)
		}
	}
	if _, err := local.ScoreRows(ctx, []RowSet{{ID: "neg", Rows: []Row{{Context: []int32{1}, Target: []int32{2}, Span: [2]int{0, 1}, Temperature: -1}}}}); err == nil {
		t.Error("Local accepted a negative temperature")
	}
}
