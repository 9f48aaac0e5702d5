package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/gpu/model"
)

func httpGet(t testing.TB, url string, wantStatus int) string {
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

// post sends a raw protocol request and returns the status and error body.
func post(t testing.TB, url string, header map[string]string, body []byte) (int, ErrorBody) {
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
	var eb ErrorBody
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		if err := json.Unmarshal(data, &eb); err != nil || eb.Code == "" || eb.Error == "" {
			t.Fatalf("status %d with body %q: not a protocol error body", resp.StatusCode, data)
		}
	}
	return resp.StatusCode, eb
}

func TestServerStatusCodes(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 4)
	slow := &gatedScorer{Scorer: NewLocal(tiny()), gate: block, entered: entered}
	srv := NewServer(slow, WithMaxRequestBytes(60000), WithMaxRows(10), WithMaxConcurrentRequests(1))
	url, _ := serveScorer(t, srv)
	v1 := map[string]string{ProtocolHeader: ProtocolVersion}
	body, _ := json.Marshal(setsToWire(makeSets(1, 1, 1)))

	if st, eb := post(t, url+PathScore, nil, body); st != 400 || eb.Code != CodeVersionMismatch {
		t.Errorf("no protocol header: %d %s, want 400 version_mismatch", st, eb.Code)
	}
	if st, eb := post(t, url+PathScore, map[string]string{ProtocolHeader: "creditflow.scorer/v0"}, body); st != 400 || eb.Code != CodeVersionMismatch {
		t.Errorf("old protocol header: %d %s", st, eb.Code)
	}
	if st, eb := post(t, url+PathScore, v1, []byte(`{"sets": [`)); st != 400 || eb.Code != CodeBadRequest {
		t.Errorf("broken JSON: %d %s", st, eb.Code)
	}
	big, _ := json.Marshal(setsToWire(makeSets(2, 40, 5)))
	if st, eb := post(t, url+PathScore, v1, big); st != 413 || eb.Code != CodeTooLarge {
		t.Errorf("%d-byte body over 60000: %d %s", len(big), st, eb.Code)
	}
	many := makeSets(2, 6, 3) // 6 sets of 2..4 rows: more than 10 rows
	rows := 0
	for _, s := range many {
		rows += len(s.Rows)
	}
	manyBody, _ := json.Marshal(setsToWire(many))
	if st, eb := post(t, url+PathScore, v1, manyBody); rows <= 10 || st != 413 || eb.Code != CodeTooLarge {
		t.Errorf("%d rows over 10: %d %s", rows, st, eb.Code)
	}
	bad := makeSets(3, 2, 2)
	bad[1].Rows[0].Target[0] = model.TinyVocab + 5
	badBody, _ := json.Marshal(setsToWire(bad))
	close(block) // let the scorer run from here on
	st, eb := post(t, url+PathScore, v1, badBody)
	if st != 400 || eb.Code != CodeBadRequest || eb.Item == nil || *eb.Item != 1 || eb.ID != "traj-1" {
		t.Errorf("bad token: %d %+v, want 400 bad_request item 1", st, eb)
	}
	req, _ := http.NewRequest(http.MethodGet, url+PathScore, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Errorf("GET /v1/score: %v %v, want 405", resp.StatusCode, err)
	}
	httpGet(t, url+"/v2/score", 404)
	if st, _ := post(t, url+PathScore, v1, body); st != 200 {
		t.Errorf("valid request: %d", st)
	}
}

func TestServerOverloaded(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 4)
	url, _ := serveScorer(t, NewServer(&gatedScorer{Scorer: NewLocal(tiny()), gate: block, entered: entered}, WithMaxConcurrentRequests(1)))
	v1 := map[string]string{ProtocolHeader: ProtocolVersion}
	body, _ := json.Marshal(setsToWire(makeSets(1, 1, 1)))
	done := make(chan int)
	go func() {
		st, _ := post(t, url+PathScore, v1, body)
		done <- st
	}()
	<-entered // the first request holds the only slot
	if st, eb := post(t, url+PathScore, v1, body); st != 503 || eb.Code != CodeOverloaded {
		t.Errorf("second concurrent request: %d %s, want 503 overloaded", st, eb.Code)
	}
	close(block)
	if st := <-done; st != 200 {
		t.Errorf("first request: %d", st)
	}
}

// gatedScorer wraps a real scorer and holds every call until gate closes.
type gatedScorer struct {
	Scorer
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedScorer) ScoreRows(ctx context.Context, sets []RowSet) ([]RowScores, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Scorer.ScoreRows(ctx, sets)
}

// flaky is a real server that answers 500 while broken.
type flaky struct {
	h      http.Handler
	broken atomic.Bool
	hits   atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == PathScore || r.URL.Path == PathAttention {
		f.hits.Add(1)
	}
	if f.broken.Load() {
		writeError(w, 500, ErrorBody{Code: CodeInternal, Error: "injected failure"})
		return
	}
	f.h.ServeHTTP(w, r)
}

// slowHandler delays every request (a hung pod) past the client's request timeout.
type slowHandler struct {
	h     http.Handler
	delay time.Duration
}

func (s *slowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Reading the body lets the server notice when the client gives up.
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	select {
	case <-time.After(s.delay):
	case <-r.Context().Done():
		return
	}
	s.h.ServeHTTP(w, r)
}

// closer accepts connections and closes them at once.
func closer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestClientFailover(t *testing.T) {
	local := NewLocal(tiny())
	good := &counter{h: NewServer(local).Handler()}
	goodURL, _ := serveHandler(t, good)
	bad := &flaky{h: NewServer(local).Handler()}
	bad.broken.Store(true)
	badURL, _ := serveHandler(t, bad)
	slowURL, _ := serveHandler(t, &slowHandler{h: NewServer(local).Handler(), delay: 10 * time.Second})
	downURL, stopDown := serveScorer(t, NewServer(local))
	closeURL := closer(t)

	c := newClient(t, []string{badURL, closeURL, slowURL, downURL, goodURL},
		WithRequestTimeout(2*time.Second), // generous: the healthy endpoint must never time out
		WithRetryPolicy(RetryPolicy{MaxAttempts: 6, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}),
		WithHealthPolicy(1, 20*time.Millisecond),
		WithMaxWait(0)) // one request per caller: many requests to spread
	sets := makeSets(10, 30, 3)
	want := expectedScores(t, sets)
	run := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := c.ScoreRows(context.Background(), sets[i:i+1])
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				equalScores(t, "failover caller", got, want[i:i+1])
			}()
		}
		wg.Wait()
	}
	run(0, 10)
	stopDown() // shut down mid-test
	run(10, 20)
	for round := 0; round < 20 && bad.hits.Load() == 0; round++ {
		run(0, 20)
	}
	if t.Failed() {
		t.FailNow()
	}
	st := c.Stats()
	if st.Retries == 0 {
		t.Fatal("no retries counted with four failing endpoints")
	}
	if good.score.Load() == 0 || bad.hits.Load() == 0 {
		t.Fatalf("the healthy endpoint served %d requests, the broken one was tried %d times; want both > 0", good.score.Load(), bad.hits.Load())
	}
	// The broken endpoint comes back: the probe finds it and it gets work.
	var badEP *endpoint
	for _, ep := range c.eps {
		if ep.url == badURL {
			badEP = ep
		}
	}
	waitFor(t, "the broken endpoint to be marked unhealthy", func() bool { return !badEP.healthy.Load() })
	bad.broken.Store(false)
	waitFor(t, "the probe to bring the endpoint back", func() bool { return badEP.healthy.Load() })
	before := bad.hits.Load()
	for round := 0; round < 20 && bad.hits.Load() == before; round++ {
		run(20, 30)
	}
	if bad.hits.Load() == before {
		t.Fatal("the recovered endpoint got no work")
	}
	t.Logf("stats %+v; good served %d requests", c.Stats(), good.score.Load())
}

func TestClientDoesNotRetryRejections(t *testing.T) {
	cnt := &counter{h: NewServer(NewLocal(tiny())).Handler()}
	url, _ := serveHandler(t, cnt)
	url2, _ := serveHandler(t, cnt)
	c := newClient(t, []string{url, url2}, WithMaxWait(20*time.Millisecond))
	bad := makeSets(11, 1, 1)
	bad[0].Rows[0].Context[0] = -3
	_, err := c.ScoreRows(context.Background(), bad)
	rej, ok := asRejected(err)
	if !ok {
		t.Fatalf("invalid token: %v, want *RejectedError", err)
	}
	if rej.Code != CodeBadRequest || rej.ID != "traj-0" || rej.Item != 0 {
		t.Fatalf("rejection %+v", rej)
	}
	if n := cnt.score.Load(); n != 1 {
		t.Fatalf("a 400 was sent %d times, want once", n)
	}
	// In a coalesced request only the faulty caller is rejected.
	sets := makeSets(12, 12, 3)
	want := expectedScores(t, sets)
	sets[5].Rows[1].Span = [2]int{3, 2}
	var wg sync.WaitGroup
	errs := make([]error, len(sets))
	for i := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.ScoreRows(context.Background(), sets[i:i+1])
			errs[i] = err
			if err == nil {
				equalScores(t, "neighbour of a bad set", got, want[i:i+1])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			if rej, ok := asRejected(err); !ok || rej.ID != "traj-5" || rej.Item != 0 {
				t.Errorf("bad caller: %v, want its own rejection", err)
			}
		} else if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
}

func TestClientSplitsOnTooLarge(t *testing.T) {
	url, _ := serveScorer(t, NewServer(NewLocal(tiny()), WithMaxRows(8)))
	c := newClient(t, []string{url}, WithMaxWait(20*time.Millisecond))
	sets := makeSets(13, 16, 4)
	want := expectedScores(t, sets)
	var wg sync.WaitGroup
	for i := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.ScoreRows(context.Background(), sets[i:i+1])
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			equalScores(t, "after split", got, want[i:i+1])
		}()
	}
	wg.Wait()
	// One caller with all 16 sets in one call: split until each part fits.
	got, err := c.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatalf("16 sets in one call over a limit of 8 rows: %v", err)
	}
	equalScores(t, "one caller split", got, want)
	// One set over the limit alone is rejected as too large, with its index.
	withHuge := append([]RowSet(nil), sets[:5]...)
	huge := RowSet{ID: "huge"}
	for k := 0; k < 9; k++ {
		huge.Rows = append(huge.Rows, sets[0].Rows[0])
	}
	withHuge = append(withHuge, huge)
	_, err = c.ScoreRows(context.Background(), withHuge)
	if rej, ok := asRejected(err); !ok || rej.Code != CodeTooLarge || rej.Item != 5 || rej.ID != "huge" {
		t.Fatalf("9 rows over a limit of 8: %v, want too_large rejection of item 5", err)
	}
}

func TestClientHonoursContext(t *testing.T) {
	finished := make(chan struct{}) // closed when the server answers
	abandoned := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // lets the server notice the client leaving
		select {
		case <-time.After(5 * time.Second):
			close(finished)
			w.WriteHeader(500)
		case <-r.Context().Done():
			close(abandoned)
		}
	})
	url, _ := serveHandler(t, h)
	c := newClient(t, []string{url})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.ScoreRows(ctx, makeSets(1, 1, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-finished:
		t.Fatal("the caller returned only after the server answered")
	default:
	}
	// With its only caller gone the request itself is cancelled.
	select {
	case <-abandoned:
	case <-finished:
		t.Fatal("the request ran to its end although its caller had gone")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := c.Attention(ctx2, makeJobs(1, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	c.Close()
	if _, err := c.ScoreRows(context.Background(), makeSets(1, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

func TestClientInfoRequiresOneModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "other-model") // Load names the model after its folder
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := model.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	other, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := serveScorer(t, NewServer(NewLocal(tiny(), WithPolicyVersion(3))))
	b, _ := serveScorer(t, NewServer(NewLocal(tiny(), WithPolicyVersion(4))))
	o, _ := serveScorer(t, NewServer(NewLocal(other)))
	info, err := newClient(t, []string{a, b}).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.PolicyVersion != 4 || info.Name != tiny().Info().Name {
		t.Fatalf("info %+v, want tiny model at policy 4", info)
	}
	_, err = newClient(t, []string{a, o}).Info(context.Background())
	if err == nil || !strings.Contains(err.Error(), "different models") {
		t.Fatalf("two models: %v, want an error", err)
	}
}

func TestServerGracefulShutdown(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := NewServer(&gatedScorer{Scorer: NewLocal(tiny()), gate: block, entered: entered})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	c := newClient(t, []string{url}, WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	sets := makeSets(50, 1, 1)
	want := expectedScores(t, sets)
	result := make(chan error, 1)
	go func() {
		got, err := c.ScoreRows(context.Background(), sets)
		if err == nil {
			equalScores(t, "request in flight during shutdown", got, want)
		}
		result <- err
	}()
	<-entered
	cancel() // shutdown starts while the request is in flight
	waitFor(t, "the server to start draining", func() bool { return srv.draining.Load() })
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v before the in-flight request finished", err)
	default:
	}
	close(block)
	if err := <-result; err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after graceful shutdown: %v", err)
	}
	if _, err := http.Get(url + PathHealth); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

func TestClientGivesUpAfterRetryLimit(t *testing.T) {
	bad := &flaky{h: http.NotFoundHandler()}
	bad.broken.Store(true)
	url, _ := serveHandler(t, bad)
	c := newClient(t, []string{url, closer(t)},
		WithRetryPolicy(RetryPolicy{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	_, err := c.ScoreRows(context.Background(), makeSets(1, 1, 1))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("all endpoints failing: %v, want ErrUnavailable", err)
	}
	if _, ok := asRejected(err); ok {
		t.Fatal("an outage reported as a rejection of the input")
	}
	if st := c.Stats(); st.Requests != 3 || st.Retries != 2 {
		t.Fatalf("stats %+v, want 3 attempts and 2 retries", st)
	}
}
