package main

import (
	"context"
	"net"
	"strings"
	"testing"
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
			return runStages(context.Background(), []string{"--brokers", addr, "--startup-timeout", "1s", "--metrics-addr", "", "--log-level", "error"})
		}},
		{"run --create-topics", func() error {
			return runStages(context.Background(), []string{"--brokers", addr, "--startup-timeout", "1s", "--create-topics", "2", "--metrics-addr", "", "--log-level", "error"})
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
	err = runStages(context.Background(), []string{"--brokers", freeAddr(t), "--startup-timeout", "1s", "--metrics-addr", addr, "--log-level", "error"})
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("run with --metrics-addr %s in use: %v", addr, err)
	}
	err = runDemo([]string{"--groups", "1", "--metrics-addr", addr})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("demo with --metrics-addr %s in use: %v", addr, err)
	}
}
