package scorer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
	"github.com/prometheus/client_golang/prometheus"
)

// flaky is a real server that answers 500 while broken.
type flaky struct {
	h      http.Handler
	broken atomic.Bool
	hits   atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == protocol.PathScore || r.URL.Path == protocol.PathAttention {
		f.hits.Add(1)
	}
	if f.broken.Load() {
		writeError(w, 500, protocol.ErrorBody{Code: scorer.CodeInternal, Error: "injected failure"})
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
	local := local.New(scorertest.Tiny())
	good := &counter{h: server.New(local).Handler()}
	goodURL, _ := scorertest.ServeHandler(t, good)
	bad := &flaky{h: server.New(local).Handler()}
	bad.broken.Store(true)
	badURL, _ := scorertest.ServeHandler(t, bad)
	slowURL, _ := scorertest.ServeHandler(t, &slowHandler{h: server.New(local).Handler(), delay: 10 * time.Second})
	downURL, stopDown := scorertest.Serve(t, server.New(local))
	closeURL := closer(t)

	reg := prometheus.NewRegistry()
	c := newClient(t, []string{badURL, closeURL, slowURL, downURL, goodURL}, client.WithRegisterer(reg),
		client.WithRequestTimeout(2*time.Second), // generous: the healthy endpoint must never time out
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 6, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}),
		client.WithHealthPolicy(1, 20*time.Millisecond),
		client.WithMaxWait(0)) // one request per caller: many requests to spread
	sets := scorertest.MakeSets(10, 30, 3)
	want := scorertest.ExpectedScores(t, sets)
	run := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, _, err := c.ScoreRows(context.Background(), sets[i:i+1])
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				scorertest.EqualScores(t, "failover caller", got, want[i:i+1])
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
	// The client's health gauge says whether it sends the endpoint work.
	healthy := func() bool {
		mfs, _ := reg.Gather()
		return promreg.Sum(mfs, "creditflow_scorer_endpoint_healthy", map[string]string{"endpoint": badURL}) == 1
	}
	scorertest.WaitFor(t, "the broken endpoint to be marked unhealthy", func() bool { return !healthy() })
	bad.broken.Store(false)
	scorertest.WaitFor(t, "the probe to bring the endpoint back", healthy)
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
	cnt := &counter{h: server.New(local.New(scorertest.Tiny())).Handler()}
	url, _ := scorertest.ServeHandler(t, cnt)
	url2, _ := scorertest.ServeHandler(t, cnt)
	c := newClient(t, []string{url, url2}, client.WithMaxWait(20*time.Millisecond))
	bad := scorertest.MakeSets(11, 1, 1)
	bad[0].Rows[0].Context[0] = -3
	_, _, err := c.ScoreRows(context.Background(), bad)
	rej, ok := scorertest.AsRejected(err)
	if !ok {
		t.Fatalf("invalid token: %v, want *RejectedError", err)
	}
	if rej.Code != scorer.CodeBadRequest || rej.ID != "traj-0" || rej.Item != 0 {
		t.Fatalf("rejection %+v", rej)
	}
	if n := cnt.score.Load(); n != 1 {
		t.Fatalf("a 400 was sent %d times, want once", n)
	}
	// In a coalesced request only the faulty caller is rejected.
	sets := scorertest.MakeSets(12, 12, 3)
	want := scorertest.ExpectedScores(t, sets)
	sets[5].Rows[1].Span = [2]int{3, 2}
	var wg sync.WaitGroup
	errs := make([]error, len(sets))
	for i := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, err := c.ScoreRows(context.Background(), sets[i:i+1])
			errs[i] = err
			if err == nil {
				scorertest.EqualScores(t, "neighbour of a bad set", got, want[i:i+1])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			if rej, ok := scorertest.AsRejected(err); !ok || rej.ID != "traj-5" || rej.Item != 0 {
				t.Errorf("bad caller: %v, want its own rejection", err)
			}
		} else if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
}

func TestClientSplitsOnTooLarge(t *testing.T) {
	url, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny()), server.WithMaxRows(8)))
	c := newClient(t, []string{url}, client.WithMaxWait(20*time.Millisecond))
	sets := scorertest.MakeSets(13, 16, 4)
	want := scorertest.ExpectedScores(t, sets)
	scoreEachAtOnce(t, c, sets, want, "after split")
	// One caller with all 16 sets in one call: split until each part fits.
	got, _, err := c.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatalf("16 sets in one call over a limit of 8 rows: %v", err)
	}
	scorertest.EqualScores(t, "one caller split", got, want)
	// One set over the limit alone is rejected as too large, with its index.
	withHuge := append([]scorer.RowSet(nil), sets[:5]...)
	huge := scorer.RowSet{ID: "huge"}
	for k := 0; k < 9; k++ {
		huge.Rows = append(huge.Rows, sets[0].Rows[0])
	}
	withHuge = append(withHuge, huge)
	_, _, err = c.ScoreRows(context.Background(), withHuge)
	if rej, ok := scorertest.AsRejected(err); !ok || rej.Code != scorer.CodeTooLarge || rej.Item != 5 || rej.ID != "huge" {
		t.Fatalf("9 rows over a limit of 8: %v, want too_large rejection of item 5", err)
	}
}

func TestClientInfoRequiresOneModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "other-model") // Load names the model after its folder
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	other, err := cpumodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny(), local.WithPolicyVersion(3))))
	b, _ := scorertest.Serve(t, server.New(local.New(scorertest.Tiny(), local.WithPolicyVersion(4))))
	o, _ := scorertest.Serve(t, server.New(local.New(other)))
	info, err := newClient(t, []string{a, b}).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.PolicyVersion != 4 || info.Name != scorertest.Tiny().Info().Name {
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
	srv := server.New(&scorertest.Gated{Scorer: local.New(scorertest.Tiny()), Gate: block, Entered: entered})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	c := newClient(t, []string{url}, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	sets := scorertest.MakeSets(50, 1, 1)
	want := scorertest.ExpectedScores(t, sets)
	result := make(chan error, 1)
	go func() {
		got, _, err := c.ScoreRows(context.Background(), sets)
		if err == nil {
			scorertest.EqualScores(t, "request in flight during shutdown", got, want)
		}
		result <- err
	}()
	<-entered
	cancel() // shutdown starts while the request is in flight
	// A draining server answers /healthz with 503 (asked of its handler: the
	// listener is closed).
	draining := func() bool {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, protocol.PathHealth, nil))
		return rec.Code == http.StatusServiceUnavailable
	}
	scorertest.WaitFor(t, "the server to start draining", draining)
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
	if _, err := http.Get(url + protocol.PathHealth); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

func TestClientGivesUpAfterRetryLimit(t *testing.T) {
	bad := &flaky{h: http.NotFoundHandler()}
	bad.broken.Store(true)
	url, _ := scorertest.ServeHandler(t, bad)
	c := newClient(t, []string{url, closer(t)},
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	_, _, err := c.ScoreRows(context.Background(), scorertest.MakeSets(1, 1, 1))
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("all endpoints failing: %v, want ErrUnavailable", err)
	}
	if _, ok := scorertest.AsRejected(err); ok {
		t.Fatal("an outage reported as a rejection of the input")
	}
	if st := c.Stats(); st.Requests != 3 || st.Retries != 2 {
		t.Fatalf("stats %+v, want 3 attempts and 2 retries", st)
	}
}
