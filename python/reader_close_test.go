package python_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// firstReader reads a sample in consumer group "restart" and then, by
// argv[3], ends without close() ("exit"), ends without close() while a
// daemon thread is still reading ("thread"), or waits to be killed ("hang").
const firstReader = `import sys, threading, time, creditflow
s = creditflow.SampleStream(sys.argv[1], "restart", topic=sys.argv[2])
if sys.argv[3] == "thread":
    got = threading.Event()
    def read():
        for _ in s:
            got.set()
    threading.Thread(target=read, daemon=True).start()
    got.wait(60)
else:
    while s.poll(1.0) is None:
        pass
print("read", flush=True)
if sys.argv[3] == "hang":
    time.sleep(600)
`

// nextReader starts in the same group and prints how long it took, from its
// SampleStream's creation, to read a sample.
const nextReader = `import sys, time, creditflow
t0 = time.monotonic()
with creditflow.SampleStream(sys.argv[1], "restart", topic=sys.argv[2]) as s:
    while s.poll(1.0) is None:
        pass
    print("%.3f" % (time.monotonic() - t0), flush=True)
`

// TestReaderRestartInSameGroup: a reader that ends without close() leaves
// its consumer group anyway (at interpreter exit), so the next reader of the
// group starts at once — also when a daemon thread was still reading (the
// process exits instead of hanging in the consumer's close); one that is
// killed holds its partitions only until its session times out (6 s), not
// librdkafka's default 45 s.
func TestReaderRestartInSameGroup(t *testing.T) {
	py := projectPython(t)
	for _, c := range []struct {
		how   string
		bound time.Duration
	}{{"exit", 10 * time.Second}, {"thread", 10 * time.Second}, {"hang", 15 * time.Second}} {
		t.Run(c.how, func(t *testing.T) {
			const topic = "restart.samples"
			b, err := broker.Start(broker.WithTopics(4, topic))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			brokers := strings.Join(b.Addrs(), ",")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			var msgs []producers.Message
			for i := range 16 {
				s := &schemas.Sample{
					TrajectoryID: fmt.Sprintf("t-%d", i), PromptID: fmt.Sprintf("p-%d", i), GroupSize: 1, Method: "lapo",
					Output: "advantages", Reward: 1, Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Advantages: []float32{0, 0.5},
					Turns: []schemas.TurnDiag{{Kind: "answer", Advantage: 0.5}},
				}
				v, err := schemas.Samples().Encode(s)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, producers.Message{Topic: topic, Key: []byte(s.PromptID), Value: v})
			}
			if err := prod.Produce(ctx, msgs...); err != nil {
				t.Fatal(err)
			}

			first := startProc(t, pyEnv(t), py, "-c", firstReader, brokers, topic, c.how)
			for !strings.Contains(first.out.String(), "read") {
				select {
				case err := <-first.done:
					first.done <- err
					t.Fatalf("the first reader ended before reading: %v\n%s", err, first.out.String())
				case <-time.After(50 * time.Millisecond):
				}
				if ctx.Err() != nil {
					t.Fatalf("the first reader read nothing\n%s", first.out.String())
				}
			}
			if c.how != "hang" {
				if err := first.wait(t, 30*time.Second); err != nil {
					t.Fatalf("the first reader: %v\n%s", err, first.out.String())
				}
			} else {
				first.kill()
			}

			next := startProc(t, pyEnv(t), py, "-c", nextReader, brokers, topic)
			if err := next.wait(t, 90*time.Second); err != nil {
				t.Fatalf("the next reader: %v\n%s", err, next.out.String())
			}
			took := -1.0
			for _, l := range strings.Split(next.out.String(), "\n") { // stdout and librdkafka's log lines
				if v, err := strconv.ParseFloat(strings.TrimSpace(l), 64); err == nil {
					took = v
				}
			}
			if took < 0 {
				t.Fatalf("the next reader's output: %q", next.out.String())
			}
			t.Logf("first reader %s: the next one read its first sample after %.1fs", map[string]string{"exit": "ended without close()", "thread": "ended without close() while a thread read", "hang": "SIGKILLed"}[c.how], took)
			if d := time.Duration(took * float64(time.Second)); d > c.bound {
				t.Fatalf("the next reader waited %v for the group, want at most %v", d, c.bound)
			}
		})
	}
}
