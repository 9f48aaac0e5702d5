package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
)

// get returns the status and body of GET url (0 when it did not answer).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunWaitsForItsScorerNotReady: `creditflow run` started before its
// scorer keeps running past --startup-timeout, answers 503 on /readyz
// saying it waits for a scorer (and 200 on /livez and /healthz) while the
// scorer is down, and 200 on /readyz soon after the scorer comes up. Its
// metrics have the build information, the assigned partitions and the
// group lag read from the brokers.
func TestRunWaitsForItsScorerNotReady(t *testing.T) {
	b := brokertest.Start(t, broker.WithDefaultPartitions(2))
	scorerAddr, metrics := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runStages(ctx, []string{"--brokers", strings.Join(b.Addrs(), ","), "--create-topics", "2",
			"--scorers", "http://" + scorerAddr, "--startup-timeout", "1s", "--commit-interval", "200ms",
			"--lag-interval", "500ms", "--metrics-addr", metrics, "--log-level", "error"})
	}()
	base := "http://" + metrics
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(base + "/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for a scorer") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz while the scorer is down: %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // three times --startup-timeout
	select {
	case err := <-done:
		t.Fatalf("run exited while waiting for its scorer: %v", err)
	default:
	}
	if code, body := get(base + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for a scorer") {
		t.Fatalf("/readyz after --startup-timeout with the scorer down: %d %q", code, body)
	}
	for _, path := range []string{"/livez", "/healthz"} {
		if code, body := get(base + path); code != http.StatusOK {
			t.Fatalf("%s while waiting for the scorer: %d %q", path, code, body)
		}
	}

	// The scorer comes up (the server `creditflow scorer` runs).
	sctx, stopScorer := context.WithCancel(context.Background())
	defer stopScorer()
	go func() { _ = server.New(local.New(cpumodel.Tiny())).ListenAndServe(sctx, scorerAddr) }()
	up := time.Now()
	for {
		code, body := get(base + "/readyz")
		if code == http.StatusOK {
			t.Logf("ready %v after the scorer started:\n%s", time.Since(up).Round(time.Millisecond), body)
			break
		}
		if time.Since(up) > time.Minute {
			t.Fatalf("/readyz a minute after the scorer came up: %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, m := get(base + "/metrics")
		if strings.Contains(m, "creditflow_build_info{") && strings.Contains(m, `go_version="go`) &&
			strings.Contains(m, `creditflow_consumer_assigned_partitions{group="creditflow.score"} 2`) &&
			strings.Contains(m, `creditflow_consumer_group_lag_records{group="creditflow.advantage",partition="1",topic="creditflow.scored"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack build_info, assigned partitions or group lag:\n%s", grepLines(m, "creditflow_build_info", "creditflow_consumer_"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	p, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	publish := func(trs []schemas.Trajectory) {
		t.Helper()
		var msgs []producers.Message
		for _, tr := range trs {
			v, err := schemas.Trajectories().Encode(&tr)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, producers.Message{Topic: "creditflow.trajectories", Key: []byte(tr.PromptID), Value: v})
		}
		if err := p.Produce(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	// A whole group and half of another: the open group holds back the
	// advantage stage's commit for its window (two minutes), which is not
	// a stall: ready all along, past the readiness window.
	gen := synth.Default()
	publish(append(gen.Group(0), gen.Group(1)[:2]...))
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); {
		if code, body := get(base + "/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz with an open group: %d %q", code, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, m := get(base + "/metrics"); !strings.Contains(m, `creditflow_records_out_total{stage="advantage",topic="creditflow.samples"}`) {
		t.Fatalf("no samples written:\n%s", grepLines(m, "creditflow_records_"))
	}

	// The scorer goes away while trajectories arrive: not ready (every
	// scorer call fails), still live, still running.
	stopScorer()
	publish(gen.Group(2))
	deadline = time.Now().Add(45 * time.Second)
	for {
		code, body := get(base + "/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "every scorer call has failed") {
			t.Logf("with the scorer gone:\n%s", body)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with the scorer gone and input pending: %d %q", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(base + "/livez"); code != http.StatusOK {
		t.Fatalf("/livez with the scorer gone: %d %q", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("run exited: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func grepLines(text string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestRunNeedsAnExplicitScorer: `run` with its score stage and no
// --scorers is a usage error that names --scorers local, instead of
// scoring with the built-in toy model unasked; the advantage stage alone
// needs no scorer.
func TestRunNeedsAnExplicitScorer(t *testing.T) {
	err := runStages(context.Background(), []string{"--brokers", freeAddr(t), "--metrics-addr", "", "--log-level", "error"})
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--scorers local") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("run without --scorers: %v (want a one-line usage error naming --scorers local)", err)
	}
	err = runStages(context.Background(), []string{"--stage", "advantage", "--brokers", freeAddr(t), "--startup-timeout", "500ms",
		"--metrics-addr", "", "--log-level", "error"})
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "no Kafka broker reachable") {
		t.Fatalf("run --stage advantage without --scorers: %v (want it to go on to the brokers)", err)
	}
}

// TestMonitorExportsGroupLag: the monitor's --lag-groups export a
// group's lag from the brokers while no member of the group runs, and a
// malformed list is refused.
func TestMonitorExportsGroupLag(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(2, "in"))
	p, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 6; i++ {
		if err := p.Produce(context.Background(), producers.Message{Topic: "in", Key: []byte{byte('a' + i)}, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := groupLagExporter(b.Addrs(), kafkasec.Config{}, "g=in,bad", time.Second, reg, zerolog.Nop()); err == nil {
		t.Fatal("a malformed --lag-groups accepted")
	}
	e, err := groupLagExporter(b.Addrs(), kafkasec.Config{}, "g.score = in", time.Second, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	e.Poll(context.Background(), nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got := promreg.Sum(mfs, "creditflow_consumer_group_lag_records", map[string]string{"group": "g.score", "topic": "in"}); got != 6 {
		t.Fatalf("lag of a group without members or commits: %v, want 6", got)
	}
}
