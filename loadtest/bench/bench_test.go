package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/schemas"
)

// Every bench size makes valid trajectories of the size it names.
func TestBenchSizes(t *testing.T) {
	lim := schemas.DefaultLimits()
	lim.VocabSize = newBenchInstantScorer().info.VocabSize
	for _, s := range benchSizes {
		lim.MaxTokens = max(schemas.DefaultMaxTokens, s.Tokens+1024)
		for g := 0; g < 3; g++ {
			tr := s.trajectory(7, g, g%benchGroupSize)
			if err := schemas.ValidateTrajectory(&tr, lim); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			if n := trajectoryTokens(&tr); s.Tokens > 0 && n != s.Tokens {
				t.Fatalf("%s: %d tokens, want %d", s.Name, n, s.Tokens)
			}
			if s.Steps > 0 && len(tr.Turns) != s.Steps {
				t.Fatalf("%s: %d steps, want %d", s.Name, len(tr.Turns), s.Steps)
			}
		}
		if n := s.records(2000); n%benchGroupSize != 0 || n < 4*benchGroupSize {
			t.Fatalf("%s: %d records for 2000", s.Name, n)
		}
	}
}

// A small bench run measures every phase of the default size: rates,
// latency and memory are positive and consistent.
func TestBenchRunsEveryPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stages on an embedded broker")
	}
	o := benchOptions{records: 100, partitions: 2, openGroups: 200, repeat: 1, timeout: 90 * time.Second, seed: 7,
		python: pyenvtest.Optional(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := runBench(ctx, o, []benchSize{benchSizes[0], benchSizes[len(benchSizes)-1]})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append([]SizeResult{res.SizeResult}, res.Sizes...) {
		if r.Error != "" {
			t.Fatalf("%s: %s", r.Size, r.Error)
		}
		if r.PassthroughPerS <= 0 || r.ScorePerS <= 0 || r.AdvantagePerS <= 0 || r.OverheadP99Ms < r.OverheadP50Ms ||
			r.OverheadP50Ms <= 0 || r.BytesPerOpenMember <= 0 || r.RecordBytes <= r.TrajectoryBytes {
			t.Fatalf("%s: implausible result %+v", r.Size, r)
		}
		if r.ScoreCPUUs <= 0 || r.AdvantageCPUUs <= 0 || r.PassthroughCPUUs <= 0 || r.BrokerRSSBytes == 0 {
			t.Fatalf("%s: CPU per record %v/%v/%v µs, broker RSS %d: the embedded broker's process was not measured",
				r.Size, r.PassthroughCPUUs, r.ScoreCPUUs, r.AdvantageCPUUs, r.BrokerRSSBytes)
		}
		if want := r.ScorePerS / r.PassthroughPerS; r.ScoreVsPassthrough < want-0.01 || r.ScoreVsPassthrough > want+0.01 {
			t.Fatalf("%s: score_vs_passthrough %v, want %v", r.Size, r.ScoreVsPassthrough, want)
		}
		if want := r.ScoreFloorPerS / r.PassthroughPerS; r.ScoreFloorPerS <= 0 || r.ScoreFloorCPUUs <= 0 ||
			r.ScoreFloorVsPassthrough < want-0.01 || r.ScoreFloorVsPassthrough > want+0.01 {
			t.Fatalf("%s: score floor %v/s (%v µs CPU), ratio %v, want %v", r.Size, r.ScoreFloorPerS, r.ScoreFloorCPUUs,
				r.ScoreFloorVsPassthrough, want)
		}
		if want := r.AdvantageFloorPerS / r.PassthroughScoredPerS; r.AdvantageFloorPerS <= 0 || r.AdvantageFloorCPUUs <= 0 ||
			r.AdvantageFloorVsPassthrough < want-0.01 || r.AdvantageFloorVsPassthrough > want+0.01 {
			t.Fatalf("%s: advantage floor %v/s (%v µs CPU), ratio %v, want %v", r.Size, r.AdvantageFloorPerS, r.AdvantageFloorCPUUs,
				r.AdvantageFloorVsPassthrough, want)
		}
	}
	if len(res.Sizes) != 1 || res.Sizes[0].Size != "attnsr-k30" || res.OpenGroups != 200 {
		t.Fatalf("sizes %+v, open groups %d", res.Sizes, res.OpenGroups)
	}
	// The trainer's end: measured where the interpreter has confluent_kafka, a note otherwise;
	// never on the AttnSR size.
	r := res.SizeResult
	if r.TrainerNote != "" {
		t.Logf("trainer phase: %s", r.TrainerNote)
	} else if want := r.TrainerPerS / r.TrainerConsumerPerS; r.TrainerPerS <= 0 || r.TrainerConsumerPerS <= 0 ||
		r.TrainerVsConsumer < want-0.01 || r.TrainerVsConsumer > want+0.01 || r.TrainerTensors == "" {
		t.Fatalf("trainer phase: %v /s, consumer %v /s, ratio %v, tensors %q", r.TrainerPerS, r.TrainerConsumerPerS, r.TrainerVsConsumer, r.TrainerTensors)
	} else if want := r.TrainerFloorPerS / r.TrainerConsumerPerS; r.TrainerFloorPerS <= 0 ||
		r.TrainerFloorVsConsumer < want-0.01 || r.TrainerFloorVsConsumer > want+0.01 {
		// the floor read every sample and built tensors of all their tokens (trainer.py checks the count)
		t.Fatalf("trainer floor: %v /s, ratio %v, want %v", r.TrainerFloorPerS, r.TrainerFloorVsConsumer, want)
	} else if want := r.TrainerPerS / r.TrainerFloorPerS; r.TrainerVsFloor < want-0.01 || r.TrainerVsFloor > want+0.01 ||
		r.TrainerCPUUs <= 0 || r.TrainerFloorCPUUs <= 0 || r.TrainerConsumerCPUUs <= 0 ||
		r.TrainerVsFloorCPU < r.TrainerFloorCPUUs/r.TrainerCPUUs-0.01 || r.TrainerVsFloorCPU > r.TrainerFloorCPUUs/r.TrainerCPUUs+0.01 {
		// the target's ratio, and the CPU the reading thread spent per sample
		t.Fatalf("trainer / floor %v, want %v; CPU µs per sample: trainer %v, floor %v, consumer %v, ratio %v",
			r.TrainerVsFloor, want, r.TrainerCPUUs, r.TrainerFloorCPUUs, r.TrainerConsumerCPUUs, r.TrainerVsFloorCPU)
	} else if want := r.TrainerFastavroPerS / r.TrainerFloorPerS; r.TrainerFastavroPerS > 0 &&
		(r.TrainerFastavroCPUUs <= 0 || r.TrainerFastavroVsFloor < want-0.01 || r.TrainerFastavroVsFloor > want+0.01) {
		// where fastavro is installed, the trainer decoding with it
		t.Fatalf("trainer with fastavro: %v /s, %v µs CPU, ratio to the floor %v, want %v",
			r.TrainerFastavroPerS, r.TrainerFastavroCPUUs, r.TrainerFastavroVsFloor, want)
	}
	if a := res.Sizes[0]; a.TrainerPerS != 0 || a.TrainerNote != "" {
		t.Fatalf("attnsr-k30 ran the trainer phase: %+v", a)
	}
}

// TestTrainerPhaseSkipsWithANote: without an interpreter that has
// confluent_kafka the phase is a note, not a failure.
func TestTrainerPhaseSkipsWithANote(t *testing.T) {
	var e benchEnv
	r, err := e.trainer(context.Background(), "/nonexistent/python3", "samples", 10, 1)
	if err != nil || !strings.Contains(r.Note, "skipped") || !strings.Contains(r.Note, "confluent_kafka") || r.PerS != 0 {
		t.Fatalf("%+v, %v", r, err)
	}
}

// The child broker's CPU is read from /proc/<pid>/stat: for this process
// the same reading agrees with getrusage.
func TestProcCPU(t *testing.T) {
	deadline := time.Now().Add(300 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	_ = x
	self := cpuTime()
	proc, err := procCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	// ticks of 10 ms; rusage counts finer
	if d := proc - self; d < -50*time.Millisecond || d > 50*time.Millisecond || proc < 200*time.Millisecond {
		t.Fatalf("/proc/self/stat says %v of CPU, getrusage %v", proc, self)
	}
}

// testBroker starts an embedded broker of 2 partitions per topic in a child
// process for the test (skipped with -short), and a context of a minute.
func testBroker(t *testing.T) (context.Context, *childBroker) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an embedded broker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b, err := startChildBroker(2, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	return ctx, b
}

// Each bench run names its topics and groups apart from earlier runs on the
// same cluster, and a finished run's topics are deleted.
func TestBenchNamesAndDrop(t *testing.T) {
	ctx, b := testBroker(t)
	a := &benchEnv{run: "a", brokers: b.addrs, partitions: 2, log: zerolog.Nop()}
	c := &benchEnv{run: "b", brokers: b.addrs, partitions: 2, log: zerolog.Nop()}
	if a.name("x") == c.name("x") {
		t.Fatalf("two runs share the name %s", a.name("x"))
	}
	topics, err := a.topics(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Every topic is listed (asking for one by name may create it again).
	listed := func() map[string]bool {
		tr := &kafka.Transport{} // its own: a transport caches metadata
		defer tr.CloseIdleConnections()
		meta, err := (&kafka.Client{Addr: kafka.TCP(a.brokers...), Transport: tr}).Metadata(ctx, &kafka.MetadataRequest{})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, mt := range meta.Topics {
			names[mt.Name] = true
		}
		return names
	}
	before := listed()
	for _, topic := range all(topics) {
		if !before[topic] {
			t.Fatalf("topic %s was not created", topic)
		}
	}
	a.drop(ctx, all(topics)...)
	after := listed()
	for _, topic := range all(topics) {
		if after[topic] {
			t.Fatalf("topic %s is still there after drop", topic)
		}
	}
}

// --compression sets every producer's codec, the stages' own included;
// without it the bench compresses as the stages do by default, and a codec
// the producers do not know is refused before anything starts.
func TestBenchCompression(t *testing.T) {
	for _, c := range []struct{ flag, want string }{{"", "lz4"}, {"zstd", "zstd"}, {"none", "none"}} {
		e := benchEnv{compression: c.flag}
		if got := e.producerConfig().Compression; got != c.want {
			t.Errorf("--compression %q: producers compress with %q, want %q", c.flag, got, c.want)
		}
	}
	code, err := Cmd([]string{"--compression", "brotli"})
	if code != 2 || err == nil || !strings.Contains(err.Error(), "brotli") {
		t.Fatalf("--compression brotli: exit %d, %v", code, err)
	}
}
