package scorer_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
)

// pod is a scorer server on one loopback address, counting its score
// requests, whose /healthz can be made to fail.
type pod struct {
	h      http.Handler
	score  atomic.Int64
	health atomic.Bool // /healthz fails while set
}

func (p *pod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case protocol.PathScore:
		p.score.Add(1)
	case protocol.PathHealth:
		if p.health.Load() {
			http.Error(w, "model unusable", http.StatusServiceUnavailable)
			return
		}
	}
	p.h.ServeHTTP(w, r)
}

// servePods serves one pod on each of the addresses, all on one port (as
// a headless service's pods share theirs), and returns the port.
func servePods(t *testing.T, ips ...string) (string, []*pod) {
	t.Helper()
	sc := local.New(scorertest.Tiny())
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("cannot listen on %s: %v", ips[0], err)
			}
			t.Skipf("cannot listen on %s (a loopback address other than 127.0.0.1: Linux has them, macOS needs an alias): %v", ips[0], err)
		}
		_, port, _ := net.SplitHostPort(first.Addr().String())
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < len(ips) {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		pods := make([]*pod, len(ips))
		for i, ln := range lns {
			pods[i] = &pod{h: server.New(sc).Handler()}
			srv := &http.Server{Handler: pods[i], ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
		}
		return port, pods
	}
	t.Fatal("no port free on every address")
	return "", nil
}

// TestClientFollowsHeadlessService: with "dns+http://NAME:PORT" the
// client sends work to every address NAME resolves to, each balanced on
// its own, picks up an address that appears and drops one that goes, and
// keeps its addresses when a lookup fails.
func TestClientFollowsHeadlessService(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	port, pods := servePods(t, ips...)
	var mu sync.Mutex
	answer, lookupErr := []string{ips[0]}, error(nil)
	lookups := atomic.Int64{}
	resolver := func(_ context.Context, host string) ([]string, error) {
		lookups.Add(1)
		if host != "scorer-headless.ns.svc" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), answer...), lookupErr
	}
	set := func(addrs []string, err error) {
		mu.Lock()
		answer, lookupErr = addrs, err
		mu.Unlock()
		n := lookups.Load()
		scorertest.WaitFor(t, "two more lookups", func() bool { return lookups.Load() >= n+2 })
	}
	reg := prometheus.NewRegistry()
	c := newClient(t, []string{"dns+http://scorer-headless.ns.svc:" + port}, client.WithResolver(resolver),
		client.WithResolveInterval(20*time.Millisecond), client.WithHealthPolicy(1, 20*time.Millisecond),
		client.WithRegisterer(reg), client.WithMaxWait(0))
	sets := scorertest.MakeSets(8, 20, 3)
	want := scorertest.ExpectedScores(t, sets)
	run := func() {
		scoreEachAtOnce(t, c, sets, want, "discovered scorer")
		if t.Failed() {
			t.FailNow()
		}
	}
	counts := func() []int64 {
		out := make([]int64, len(pods))
		for i, p := range pods {
			out[i] = p.score.Load()
		}
		return out
	}
	healthy := func(ip string) float64 {
		mfs, _ := reg.Gather()
		return promreg.Sum(mfs, "creditflow_scorer_endpoint_healthy", map[string]string{"endpoint": "http://" + net.JoinHostPort(ip, port)})
	}

	run()
	if got := counts(); got[0] == 0 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("one address: requests per pod %v", got)
	}
	// Two pods join: each gets work of its own.
	set(ips, nil)
	scorertest.WaitFor(t, "the new pods in rotation", func() bool { return healthy(ips[1]) == 1 && healthy(ips[2]) == 1 })
	before := counts()
	for round := 0; round < 20; round++ {
		run()
		now := counts()
		if now[0] > before[0] && now[1] > before[1] && now[2] > before[2] {
			break
		}
		if round == 19 {
			t.Fatalf("three addresses: requests per pod %v then %v, want every pod to get work", before, now)
		}
	}
	// The first pod goes: no more work for it.
	set(ips[1:], nil)
	before = counts()
	run()
	run()
	if now := counts(); now[0] != before[0] || now[1]+now[2] == before[1]+before[2] {
		t.Fatalf("after the first address left: requests per pod %v then %v", before, now)
	}
	// A failed lookup keeps the addresses.
	set(nil, errors.New("DNS server unreachable"))
	before = counts()
	run()
	if now := counts(); now[1]+now[2] == before[1]+before[2] {
		t.Fatalf("after a failed lookup: requests per pod %v then %v", before, now)
	}
	if healthy(ips[0]) != 0 {
		t.Errorf("the address that left still has a health series")
	}
	t.Logf("requests per pod %v, %d lookups", counts(), lookups.Load())
}

// TestClientDropsPodWhoseHealthFails: an endpoint whose /healthz fails
// leaves the rotation before any request fails there, and comes back
// when it passes again.
func TestClientDropsPodWhoseHealthFails(t *testing.T) {
	port, pods := servePods(t, "127.0.0.5", "127.0.0.6")
	urls := []string{"http://127.0.0.5:" + port, "http://127.0.0.6:" + port}
	reg := prometheus.NewRegistry()
	c := newClient(t, urls, client.WithHealthCheck(20*time.Millisecond), client.WithHealthPolicy(3, 20*time.Millisecond),
		client.WithRegisterer(reg), client.WithMaxWait(0))
	healthy := func(u string) float64 {
		mfs, _ := reg.Gather()
		return promreg.Sum(mfs, "creditflow_scorer_endpoint_healthy", map[string]string{"endpoint": u})
	}
	sets := scorertest.MakeSets(8, 20, 3)
	score := func() {
		for i := range sets {
			if _, _, err := c.ScoreRows(context.Background(), sets[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	pods[1].health.Store(true)
	scorertest.WaitFor(t, "the sick pod out of rotation", func() bool { return healthy(urls[1]) == 0 })
	before := pods[1].score.Load()
	score()
	if got := pods[1].score.Load(); got != before {
		t.Fatalf("the pod whose /healthz fails got %d requests", got-before)
	}
	pods[1].health.Store(false)
	scorertest.WaitFor(t, "the pod back in rotation", func() bool { return healthy(urls[1]) == 1 })
	for round := 0; round < 20 && pods[1].score.Load() == before; round++ {
		score()
	}
	if pods[1].score.Load() == before {
		t.Fatal("the recovered pod got no work")
	}
}
