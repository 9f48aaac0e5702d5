package policy_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

func start(t *testing.T) (*broker.Broker, *producers.Producer, context.Context) {
	t.Helper()
	b, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close() })
	return b, prod, ctx
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// value reads a gauge's or counter's current value.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v (%d families)", err, len(mfs))
	}
	m := mfs[0].GetMetric()[0]
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

func gauge(t *testing.T, g prometheus.Gauge) float64     { return value(t, g) }
func counter(t *testing.T, c prometheus.Counter) float64 { return value(t, c) }

// TestFollowerNewestIsMaximum: the newest version is the maximum read, in
// whatever order announcements arrive; an undecodable record is skipped and
// counted; a follower started later reads everything from the start and is
// Ready only after that; callbacks see each increase once, in order.
func TestFollowerNewestIsMaximum(t *testing.T) {
	b, prod, ctx := start(t)
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, policy.TopicSpec("")); err != nil {
		t.Fatal(err)
	}
	version, invalid := policy.NewMetrics()
	var mu sync.Mutex
	var seen []int64
	f := policy.NewFollower(b.Addrs(), kafkasec.Config{}, "", policy.WithPollInterval(10*time.Millisecond),
		policy.WithMetrics(version, invalid), policy.WithOnNewest(func(a schemas.PolicyAnnouncement) {
			mu.Lock()
			seen = append(seen, a.Version)
			mu.Unlock()
		}))
	go func() { _ = f.Run(ctx) }()
	if !f.WaitReady(ctx, 30*time.Second) {
		t.Fatal("follower of an empty topic never ready")
	}
	if _, ok := f.Newest(); ok || gauge(t, version) != -1 {
		t.Fatalf("a version before any announcement (gauge %v)", gauge(t, version))
	}
	for _, v := range []int64{3, 1, 7, 7, 5} {
		if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: v, Checkpoint: "/ckpt"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.Produce(ctx, producers.Message{Topic: policy.DefaultTopic, Key: []byte(schemas.PolicyKey), Value: []byte("not avro")}); err != nil {
		t.Fatal(err)
	}
	if err := policy.Announce(ctx, prod, "", schemas.PolicyAnnouncement{Version: 6}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the undecodable record to be counted", func() bool { return counter(t, invalid) == 1 })
	time.Sleep(100 * time.Millisecond) // the last announcement (6) is read in the same or the next poll
	if v, _ := f.Newest(); v != 7 || gauge(t, version) != 7 {
		t.Fatalf("newest %d, gauge %v; want 7", v, gauge(t, version))
	}
	if a, _ := f.Latest(); a.Checkpoint != "/ckpt" || a.AnnouncedAtMs == 0 {
		t.Fatalf("latest announcement %+v", a)
	}
	mu.Lock()
	got := append([]int64(nil), seen...)
	mu.Unlock()
	if len(got) == 0 || got[len(got)-1] != 7 {
		t.Fatalf("callbacks saw %v, want increases ending at 7", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("callbacks saw %v, not increasing", got)
		}
	}

	// A follower started now reads the whole topic before it is ready.
	late := policy.NewFollower(b.Addrs(), kafkasec.Config{}, "")
	go func() { _ = late.Run(ctx) }()
	if !late.WaitReady(ctx, 30*time.Second) {
		t.Fatal("late follower never ready")
	}
	if v, ok := late.Newest(); !ok || v != 7 {
		t.Fatalf("late follower ready with newest %d (%v), want 7", v, ok)
	}
}

// TestFollowerMissingTopic: a topic that does not exist yet means nothing
// announced; the follower is ready and picks announcements up once the
// topic appears.
func TestFollowerMissingTopic(t *testing.T) {
	b, prod, ctx := start(t)
	f := policy.NewFollower(b.Addrs(), kafkasec.Config{}, "policy.later", policy.WithPollInterval(10*time.Millisecond))
	go func() { _ = f.Run(ctx) }()
	if !f.WaitReady(ctx, 30*time.Second) {
		t.Fatal("follower of a missing topic never ready")
	}
	if _, ok := f.Newest(); ok {
		t.Fatal("a version from a missing topic")
	}
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, policy.TopicSpec("policy.later")); err != nil {
		t.Fatal(err)
	}
	if err := policy.Announce(ctx, prod, "policy.later", schemas.PolicyAnnouncement{Version: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "version 2", func() bool { v, ok := f.Newest(); return ok && v == 2 })
	if err := policy.Announce(ctx, prod, "policy.later", schemas.PolicyAnnouncement{Version: -1}); err == nil {
		t.Fatal("announced a negative version")
	}
}
