package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/policy"
)

// TestAnnounceCommand runs `creditflow announce` as a user would and reads
// the announcement back with a follower.
func TestAnnounceCommand(t *testing.T) {
	b := brokertest.Start(t)
	brokers := strings.Join(b.Addrs(), ",")
	if err := runAnnounce([]string{"--brokers", brokers}); err == nil || !strings.Contains(err.Error(), "--version") {
		t.Fatalf("announce without --version: %v", err)
	}
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	err := runAnnounce([]string{"--brokers", brokers, "--create-topic", "--version", "4", "--checkpoint", "/ckpt/4"})
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if err != nil || !strings.Contains(string(out), "announced policy version 4 on creditflow.policy") {
		t.Fatalf("announce: %v %q", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := policy.NewFollower(b.Addrs(), kafkasec.Config{}, "")
	go func() { _ = f.Run(ctx) }()
	if !f.WaitReady(ctx, 30*time.Second) {
		t.Fatal("follower not ready")
	}
	if a, ok := f.Latest(); !ok || a.Version != 4 || a.Checkpoint != "/ckpt/4" {
		t.Fatalf("read back %+v (%v)", a, ok)
	}
}
