package policyfollow

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/syncbuf"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
)

// TestScorerFollowsAnnouncements serves the CPU scorer with --follow-policy
// semantics while clients keep scoring: an announcement with a checkpoint
// folder mid-traffic fails no request, and later answers carry the new
// version; an announcement whose checkpoint does not load keeps the
// current weights and version.
func TestScorerFollowsAnnouncements(t *testing.T) {
	b, prod := policyBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	sc := local.New(cpumodel.Tiny(), local.WithPolicyVersion(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.New(sc).Serve(ctx, ln) }()
	c, err := client.New([]string{"http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	follower := Start(ctx, sc, b.Addrs(), kafkasec.Config{}, "", zerolog.Nop(), policy.WithPollInterval(20*time.Millisecond))
	dir := t.TempDir()
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}

	set := scorer.RowSet{ID: "t", Rows: []scorer.Row{{Context: cpumodel.TinyTokens("who wrote hamlet?"),
		Target: cpumodel.TinyTokens("<answer>shakespeare</answer>"), Span: [2]int{8, 19}}}}
	var (
		mu       sync.Mutex
		versions [4][]int64
		failures []error
		answered atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for w := range versions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				res, _, err := c.ScoreRows(ctx, []scorer.RowSet{set})
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else if res[0].PolicyVersion == nil {
					failures = append(failures, errNoVersion)
				} else {
					versions[w] = append(versions[w], *res[0].PolicyVersion)
				}
				mu.Unlock()
				answered.Add(1)
			}
		}()
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				stop.Store(true)
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitUntil("traffic", func() bool { return answered.Load() >= 20 })
	if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: 2, Checkpoint: dir}); err != nil {
		t.Fatal(err)
	}
	latest := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		v := int64(-1)
		for _, vs := range versions {
			if len(vs) > 0 {
				v = max(v, vs[len(vs)-1])
			}
		}
		return v
	}
	waitUntil("an answer from version 2", func() bool { return latest() == 2 })
	// A checkpoint that does not load keeps version 2.
	if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: 3, Checkpoint: dir + "/missing"}); err != nil {
		t.Fatal(err)
	}
	waitUntil("the follower to read version 3", func() bool { v, _ := follower.Newest(); return v == 3 })
	n := answered.Load()
	waitUntil("more traffic", func() bool { return answered.Load() >= n+20 })
	stop.Store(true)
	wg.Wait()

	if len(failures) != 0 {
		t.Fatalf("%d requests failed during the swap, first: %v", len(failures), failures[0])
	}
	for w, vs := range versions {
		for i := 1; i < len(vs); i++ {
			if vs[i] < vs[i-1] {
				t.Fatalf("client %d saw version %d after %d", w, vs[i], vs[i-1])
			}
		}
		if len(vs) == 0 || vs[len(vs)-1] != 2 {
			t.Fatalf("client %d saw versions %v, want 2 at the end", w, vs)
		}
	}
	if versions[0][0] != 1 && versions[1][0] != 1 && versions[2][0] != 1 && versions[3][0] != 1 {
		t.Fatal("no answer from version 1 before the announcement")
	}
	if got, _ := sc.Info(ctx); got.PolicyVersion != 2 {
		t.Fatalf("scorer reports version %d after a failed load of 3, want 2", got.PolicyVersion)
	}
	job := scorer.AttentionJob{ID: "a", Tokens: cpumodel.TinyTokens("look; you see a mug. take mug. done"),
		Steps: []scorer.Step{{Action: [2]int{0, 5}, Observation: [2]int{5, 20}}, {Action: [2]int{20, 29}}, {Action: [2]int{29, 35}}}, Layers: []int{0, 1}}
	if res, err := c.Attention(ctx, []scorer.AttentionJob{job}, scorer.AttentionOptions{}); err != nil || res.PolicyVersion != 2 {
		t.Fatalf("attention answered by version %d (%v), want 2", res.PolicyVersion, err)
	}
}

var errNoVersion = errorString("answer without a policy version")

type errorString string

func (e errorString) Error() string { return string(e) }

// syncBuffer is a bytes.Buffer safe for a logger and a reader at once.
// syncBuffer is a child process's output, read while it runs.
type syncBuffer = syncbuf.Buffer

// TestScorerLogsAFailedCheckpointOnce: a checkpoint that does not load is
// logged once per announced version, whether it was announced before the
// scorer started (read at catch-up, then woken again) or while it runs.
func TestScorerLogsAFailedCheckpointOnce(t *testing.T) {
	b, prod := policyBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	missing := t.TempDir() + "/missing"
	if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: 3, Checkpoint: missing}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	sc := local.New(cpumodel.Tiny(), local.WithPolicyVersion(0))
	follower := Start(ctx, sc, b.Addrs(), kafkasec.Config{}, "", zerolog.New(&logs), policy.WithPollInterval(20*time.Millisecond))
	count := func() int { return strings.Count(logs.String(), "announced checkpoint not loaded") }
	time.Sleep(500 * time.Millisecond) // polls and wake-ups after the catch-up
	if n := count(); n != 1 {
		t.Fatalf("version 3 logged %d times, want once:\n%s", n, logs.String())
	}
	if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: 4, Checkpoint: missing}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v, _ := follower.Newest(); v == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower did not read version 4")
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != 2 {
		t.Fatalf("versions 3 and 4 logged %d times, want once each:\n%s", n, logs.String())
	}
	if got, _ := sc.Info(ctx); got.PolicyVersion != 0 {
		t.Fatalf("scorer reports version %d after failed loads, want 0", got.PolicyVersion)
	}
}

// policyBroker starts an embedded broker with the policy topic and a
// producer on it.
func policyBroker(t *testing.T) (*broker.Broker, *producers.Producer) {
	t.Helper()
	b := brokertest.Start(t)
	if err := producers.EnsureTopics(context.Background(), b.Addrs(), kafkasec.Config{}, policy.TopicSpec("")); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	return b, prod
}
