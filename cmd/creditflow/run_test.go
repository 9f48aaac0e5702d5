package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// TestRunUnreachableBrokersExits: with nothing listening at --brokers, run
// (with and without --create-topics) and replay exit with an error that
// names the address and the cause instead of retrying forever.
func TestRunUnreachableBrokersExits(t *testing.T) {
	addr := freeAddr(t) // nothing listens there
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"run", func() error {
			return runStages(context.Background(), []string{"--brokers", addr, "--startup-timeout", "1s", "--scorers", "local", "--metrics-addr", "", "--log-level", "error"})
		}},
		{"run --create-topics", func() error {
			return runStages(context.Background(), []string{"--brokers", addr, "--startup-timeout", "1s", "--create-topics", "2", "--scorers", "local", "--metrics-addr", "", "--log-level", "error"})
		}},
		{"replay", func() error {
			return runReplay([]string{"--brokers", addr, "--startup-timeout", "1s", "--topic-samples", "x"})
		}},
	} {
		err := c.run()
		if err == nil {
			t.Fatalf("%s against %s: no error", c.name, addr)
		}
		for _, want := range []string{addr, "connection refused", "--startup-timeout"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", c.name, err, want)
			}
		}
	}
}

// TestRunMetricsPortInUse: a --metrics-addr that is taken fails at start.
func TestRunMetricsPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	err = runStages(context.Background(), []string{"--brokers", freeAddr(t), "--startup-timeout", "1s", "--scorers", "local", "--metrics-addr", addr, "--log-level", "error"})
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("run with --metrics-addr %s in use: %v", addr, err)
	}
	err = runDemo([]string{"--groups", "1", "--metrics-addr", addr})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("demo with --metrics-addr %s in use: %v", addr, err)
	}
}

// TestRunMissingTopicsExits: run on a broker that lacks some of its topics,
// without --create-topics, exits within --startup-timeout with an error
// naming the missing topics, and creates none of them.
func TestRunMissingTopicsExits(t *testing.T) {
	b := brokertest.Start(t, broker.WithTopics(2, "creditflow.trajectories", "creditflow.scored"))
	addr := strings.Join(b.Addrs(), ",")
	cases := []struct {
		stage   string
		missing []string
	}{
		{"score", []string{"creditflow.dead-letters"}},
		{"both", []string{"creditflow.samples", "creditflow.dead-letters", "creditflow.advantage-state", "creditflow.policy"}},
	}
	for _, c := range cases {
		start := time.Now()
		err := runStages(context.Background(), []string{"--brokers", addr, "--stage", c.stage, "--startup-timeout", "2s", "--scorers", "local",
			"--metrics-addr", "", "--log-level", "error"})
		if err == nil {
			t.Fatalf("--stage %s without its topics: no error", c.stage)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("--stage %s: exited after %v, want about --startup-timeout", c.stage, took)
		}
		wants := append([]string{"missing topics", "--create-topics"}, c.missing...)
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--stage %s: error %q does not say %q", c.stage, err, want)
			}
		}
		if strings.Contains(err.Error(), "creditflow.trajectories") {
			t.Errorf("--stage %s: error %q names a topic that exists", c.stage, err)
		}
		missing, err := producers.MissingTopics(context.Background(), b.Addrs(), kafkasec.Config{}, c.missing...)
		if err != nil || len(missing) != len(c.missing) {
			t.Fatalf("after the check, missing %v (%v): the check created topics", missing, err)
		}
	}
}

// TestDeadBrokerSaysNoBrokerReachable: announce and monitor pointed at a
// closed port say, as run does, that no broker is reachable at that
// address and why, within their --startup-timeout.
func TestDeadBrokerSaysNoBrokerReachable(t *testing.T) {
	addr := freeAddr(t) // nothing listens there
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"announce", func() error {
			return runAnnounce([]string{"--brokers", addr, "--startup-timeout", "1s", "--version", "1"})
		}},
		{"monitor --once", func() error {
			return runMonitor([]string{"--brokers", addr, "--startup-timeout", "1s", "--once"})
		}},
	} {
		start := time.Now()
		err := c.run()
		if err == nil {
			t.Fatalf("%s against %s: no error", c.name, addr)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: took %v to give up", c.name, took)
		}
		for _, want := range []string{"no Kafka broker reachable", addr, "connection refused"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", c.name, err, want)
			}
		}
	}
}
