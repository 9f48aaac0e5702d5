package python_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// TestSampleStreamWaitsForTopic: a trainer started before the samples topic
// exists waits for it with a log line instead of raising
// UNKNOWN_TOPIC_OR_PART, and reads the first sample once the topic is made.
func TestSampleStreamWaitsForTopic(t *testing.T) {
	py := projectPython(t)
	b, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const topic = "late.samples"
	script := `import sys, creditflow
s = creditflow.SampleStream(sys.argv[1], "trainer", topic=sys.argv[2], idle_timeout=60)
for sample in s:
    print(sample["trajectory_id"], flush=True)
    break
s.close()`
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", script, strings.Join(b.Addrs(), ","), topic)
	cmd.Dir = repoRoot(t)
	cmd.Env = pyEnv(t)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !strings.Contains(stderr.String(), "does not exist yet") {
		select {
		case err := <-done:
			t.Fatalf("the trainer exited before the topic existed: %v\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if ctx.Err() != nil {
			t.Fatalf("no waiting log line; stderr:\n%s", stderr.String())
		}
	}
	if err := producers.EnsureTopics(ctx, b.Addrs(), kafkasec.Config{}, producers.TopicSpec{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	s := &schemas.Sample{
		TrajectoryID: "t-late", PromptID: "p-1", GroupSize: 1, Method: "lapo", Output: "advantages", Reward: 1,
		Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Advantages: []float32{0, 0.5}, RolloutLogprobs: []float32{0, -1},
		Turns: []schemas.TurnDiag{{Kind: "answer", Advantage: 0.5}},
	}
	v, err := schemas.Samples().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.Produce(ctx, producers.Message{Topic: topic, Key: []byte(s.TrajectoryID), Value: v}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("trainer: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != "t-late" {
		t.Fatalf("trainer read %q, want t-late; stderr:\n%s", got, stderr.String())
	}
	t.Logf("read the sample %.1fs after the topic was made", time.Since(start).Seconds())
}

// TestExampleTrainerCtrlC: Ctrl-C stops examples/python/trainer.py with its
// summary line and status 130, not a traceback.
func TestExampleTrainerCtrlC(t *testing.T) {
	py := projectPython(t)
	b, err := broker.Start(broker.WithTopics(2, "creditflow.samples"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd := exec.Command(py, "examples/python/trainer.py", "--brokers", strings.Join(b.Addrs(), ","), "--expect", "5")
	cmd.Dir = repoRoot(t)
	cmd.Env = pyEnv(t)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // in its loop, waiting for samples
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("trainer did not stop on Ctrl-C; stderr:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Errorf("exit: %v, want status 130", err)
	}
	if strings.Contains(stderr.String(), "Traceback") || !strings.Contains(stdout.String(), `"interrupted": true`) {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}
