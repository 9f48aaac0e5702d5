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

// TestAnnounceToAMissingTopic: announcing to a policy topic that does not
// exist fails within seconds with an error that names the topic and
// --create-topic, and creates nothing.
func TestAnnounceToAMissingTopic(t *testing.T) {
	b := brokertest.Start(t)
	before := listTopics(t, b.Addrs())
	start := time.Now()
	err := runAnnounce([]string{"--brokers", strings.Join(b.Addrs(), ","), "--version", "1", "--topic-policy", "no.such.policy"})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "no.such.policy") || !strings.Contains(err.Error(), "--create-topic") {
		t.Fatalf("announce to a missing topic: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("the error came after %v", took)
	}
	if after := listTopics(t, b.Addrs()); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("topics %v, before %v", after, before)
	}
}
