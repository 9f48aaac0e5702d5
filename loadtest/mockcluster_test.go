package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/credit"
)

// startMockCluster starts librdkafka's mock cluster (3 brokers, an
// independent Kafka implementation) with the given "topic:partitions"
// topics, through testdata/mockcluster.py, and returns its bootstrap list.
// It runs on the project's Python environment, whose confluent-kafka wheel
// carries librdkafka.
func startMockCluster(t *testing.T, topics ...string) []string {
	t.Helper()
	py := pyenvtest.Python(t)
	cmd := exec.Command(py, append([]string{"testdata/mockcluster.py"}, topics...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the cluster stops when stdin closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if ok && l != "" {
			return strings.Split(l, ",")
		}
	case <-time.After(30 * time.Second):
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Fatalf("librdkafka not found (the confluent-kafka wheel of the project's Python environment carries it): %s", strings.TrimSpace(stderr.String()))
	}
	t.Fatalf("librdkafka's mock cluster did not start: %v\n%s", err, stderr.String())
	return nil
}

// TestLibrdkafkaMockCluster runs the pipeline end to end on librdkafka's
// mock cluster instead of the embedded broker: an uninterrupted reference
// run, then a run with two replicas of `creditflow run` in one consumer
// group — the second joins under load (a rebalance), the first is SIGKILLed
// and restarted. AttnSR, 4 partitions per topic, a 4-partition state topic.
// Every sample must arrive and equal the reference's byte for byte (the EMA
// baseline it carries included); no partition may start its EMA over.
func TestLibrdkafkaMockCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("about 40 s of child processes")
	}
	const parts, groups = 4, 8
	var specs []string
	for _, prefix := range []string{"ref", "mock"} {
		tp := topicsFor(prefix)
		for _, name := range []string{tp.Trajectories, tp.Scored, tp.Samples, tp.SamplesStale, tp.State} {
			specs = append(specs, fmt.Sprintf("%s:%d", name, parts))
		}
		specs = append(specs, tp.DeadLetters+":1", tp.Policy+":1")
	}
	brokers := startMockCluster(t, specs...)
	t.Logf("librdkafka mock cluster at %v", brokers)

	dir := testDir(t)
	e, err := newExternalEnv(creditflowBin(t), dir, brokers, parts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	const method = credit.MethodAttnSR
	w := newWorkload(method, groups, 7)
	ref, err := runReference(ctx, e, w, method, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reference: %d samples in %.1fs", len(ref.samples), ref.seconds)

	tp := topicsFor("mock")
	args := processorArgs(e.brokers, "mock", tp, method, nil, "--session-timeout", "6s")
	a := newProc("replica-a", e.bin, dir, args...)
	b := newProc("replica-b", e.bin, dir, args...)
	defer a.stop(syscall.SIGKILL, 5*time.Second)
	defer b.stop(syscall.SIGKILL, 5*time.Second)
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	col := newCollector(e, tp, w)
	cctx, cancelCol := context.WithCancel(ctx)
	defer cancelCol()
	go col.run(cctx)

	// The input comes in three parts: the join happens after the first
	// part's samples began to arrive, the kill after the second's.
	phase := make(chan struct{}, 2)
	released := 0
	ready := func(g int) bool {
		for drained := false; !drained; {
			select {
			case <-phase:
				released++
			default:
				drained = true
			}
		}
		return g < (released+1)*groups/3
	}
	prodErr := make(chan error, 1)
	rctx, stopProd := context.WithCancel(ctx)
	defer stopProd()
	go func() { prodErr <- e.produce(rctx, w, tp.Trajectories, 200*time.Millisecond, ready) }()

	deadline := time.Now().Add(3 * time.Minute)
	waitSeen := func(n int, what string) {
		t.Helper()
		if !col.waitFor(ctx, n, deadline) {
			s, _ := col.progress()
			t.Fatalf("%s: %d of %d samples (logs in %s)", what, s, n, dir)
		}
	}
	third := groups / 3 * groupSize
	waitSeen(third/2, "before the join")
	if err := b.start(); err != nil { // a second member: the group rebalances
		t.Fatal(err)
	}
	phase <- struct{}{}
	waitSeen(third+third/2, "before the kill")
	a.stop(syscall.SIGKILL, 5*time.Second)
	t.Log("SIGKILL of replica-a")
	phase <- struct{}{}
	time.Sleep(time.Second)
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	waitSeen(w.expected(), "after the kill")
	if err := <-prodErr; err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // late duplicates
	cleanA := a.stop(syscall.SIGTERM, 40*time.Second)
	cleanB := b.stop(syscall.SIGTERM, 40*time.Second)
	col.poll(ctx)
	res := col.compare(ref.samples, validateSample)
	dead, reasons := col.deadLetters()
	warnings := logSummary(a.logf, b.logf)
	t.Logf("comparison %+v; dead letters %d %v; clean stops %v %v; warnings %v", res, dead, reasons, cleanA, cleanB, warnings)
	if !res.OK() || res.Seen != w.expected() || res.Unexpected != 0 {
		t.Fatalf("lost %d (e.g. %v), mismatched %d (e.g. %v), invalid %d, unexpected %d; want all 0",
			res.Lost, res.LostIDs, res.Mismatched, res.BadIDs, res.Invalid, res.Unexpected)
	}
	if dead != 0 {
		t.Fatalf("%d dead letters (%v) from valid input", dead, reasons)
	}
	if n := stateResets(warnings); n != 0 {
		t.Fatalf("%d partitions found no state snapshot and started the EMA over", n)
	}
	if a.unexpectedExits()+b.unexpectedExits() != 0 {
		t.Fatalf("a replica died without being stopped (logs in %s)", dir)
	}
}
