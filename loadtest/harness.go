package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// groupSize is G of the synthetic workload.
const groupSize = 5

// buildBinary builds cmd/creditflow into dir and returns the binary's path.
func buildBinary(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "creditflow")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/creditflow")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build creditflow: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// moduleRoot finds the directory holding go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod found above the working directory: run the harness inside the creditflow module, or pass --bin")
		}
		dir = parent
	}
}

// env is what one harness run shares: the embedded broker that outlives
// every processor, the creditflow binary and a scratch directory for logs.
type env struct {
	b       *broker.Broker
	brokers []string
	bin     string
	built   bool // bin was built for this run: removed by Close (the logs stay)
	dir     string
	parts   int
	state   int // partitions of the state topic (1 here; run --create-topics N makes N, like the scored topic)
	log     zerolog.Logger
	prod    *producers.Producer
}

func newEnv(ctx context.Context, bin, dir string, partitions int, log zerolog.Logger) (*env, error) {
	built := bin == ""
	if built {
		var err error
		if bin, err = buildBinary(ctx, dir); err != nil {
			return nil, err
		}
	}
	b, err := broker.Start(broker.WithDefaultPartitions(partitions))
	if err != nil {
		return nil, err
	}
	prod, err := producers.New(producers.Config{Brokers: b.Addrs(), RetryFor: 5 * time.Minute})
	if err != nil {
		b.Close()
		return nil, err
	}
	return &env{b: b, brokers: b.Addrs(), bin: bin, built: built, dir: dir, parts: partitions, state: 1, log: log, prod: prod}, nil
}

// newExternalEnv is an env on a cluster the harness did not start: any
// Kafka implementation at brokers. createTopics creates only the topics
// that do not exist there, so a cluster without CreateTopics works when the
// topics were made by other means.
func newExternalEnv(bin, dir string, brokers []string, partitions int) (*env, error) {
	prod, err := producers.New(producers.Config{Brokers: brokers, RetryFor: 5 * time.Minute})
	if err != nil {
		return nil, err
	}
	return &env{brokers: brokers, bin: bin, dir: dir, parts: partitions, state: 1, log: nopLog(), prod: prod}, nil
}

func (e *env) Close() {
	_ = e.prod.Close()
	if e.b != nil {
		e.b.Close()
	}
	if e.built {
		_ = os.Remove(e.bin)
	}
}

// topics are the topic names of one pipeline instance, all prefixed.
func topicsFor(prefix string) stage.Topics {
	t := stage.DefaultTopics()
	t.Trajectories = prefix + "." + t.Trajectories
	t.Scored = prefix + "." + t.Scored
	t.Samples = prefix + "." + t.Samples
	t.DeadLetters = prefix + "." + t.DeadLetters
	t.State = prefix + "." + t.State
	t.SamplesStale = prefix + "." + t.SamplesStale
	t.Policy = prefix + "." + t.Policy
	return t
}

func (e *env) createTopics(ctx context.Context, t stage.Topics) error {
	cfg := stage.Config{Topics: t}
	specs := cfg.TopicSpecs(e.parts)
	for i := range specs {
		if specs[i].Name == t.State && e.state > 0 {
			specs[i].Partitions = e.state
		}
	}
	if e.b == nil { // an outside cluster: create only what is missing
		var missing []producers.TopicSpec
		for _, s := range specs {
			if ps, err := consumers.Partitions(ctx, e.brokers, kafkasec.Config{}, s.Name); err != nil || len(ps) == 0 {
				missing = append(missing, s)
			}
		}
		specs = missing
	}
	return producers.EnsureTopics(ctx, e.brokers, kafkasec.Config{}, specs...)
}

// workload is the deterministic input of a run.
type workload struct {
	gen    synth.Config
	groups int
}

func newWorkload(method vocab.Method, groups int, seed uint64) workload {
	gen := synth.Default()
	gen.Seed, gen.GroupSize = seed, groupSize
	if method == credit.MethodAttnSR {
		gen.Shape = synth.ALFWorld
	}
	return workload{gen: gen, groups: groups}
}

func (w workload) expected() int { return w.groups * groupSize }

func (w workload) messages(topic string, g int) ([]producers.Message, error) {
	var msgs []producers.Message
	for _, t := range w.gen.Group(g) {
		b, err := schemas.Trajectories().Encode(&t)
		if err != nil {
			return nil, fmt.Errorf("encode trajectory %s: %w", t.TrajectoryID, err)
		}
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte(t.PromptID), Value: b,
			Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Trajectories().Name())}}})
	}
	return msgs, nil
}

// produce writes groups [0, w.groups) to topic, one group every interval
// (all at once when interval is 0). When ready is set, group g is written
// only once ready(g) is true (the input is held back until the faults
// planned for the part before it have happened).
func (e *env) produce(ctx context.Context, w workload, topic string, interval time.Duration, ready func(g int) bool) error {
	for g := 0; g < w.groups; g++ {
		for ready != nil && !ready(g) {
			if !cmdutil.SleepCtx(ctx, 50*time.Millisecond) {
				return ctx.Err()
			}
		}
		msgs, err := w.messages(topic, g)
		if err != nil {
			return err
		}
		if err := e.prod.Produce(ctx, msgs...); err != nil {
			return fmt.Errorf("produce group %d: %w", g, err)
		}
		if interval > 0 && g < w.groups-1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(interval):
			}
		}
	}
	return nil
}

// faultPlan spreads n faults over a run of groups groups: the input is cut
// into n+1 segments of whole groups; fault i happens once a random share
// (30–90 %) of segment i's samples was seen, and segment i+1 is produced
// only after fault i happened. So every planned fault happens, while the
// processor has work, however fast or slow the machine is.
type faultPlan struct {
	bounds  []int // bounds[j]: first group of segment j; bounds[n+1] = groups
	targets []int // samples seen before fault i
}

func newFaultPlan(r *rand.Rand, n, groups int) (faultPlan, error) {
	if n > 0 && groups < n+1 {
		return faultPlan{}, fmt.Errorf("%d faults need at least %d groups (one segment of input before each and one after the last)", n, n+1)
	}
	p := faultPlan{bounds: make([]int, n+2), targets: make([]int, n)}
	for j := range p.bounds {
		p.bounds[j] = j * groups / (n + 1)
	}
	for i := range p.targets {
		lo, hi := p.bounds[i], p.bounds[i+1]
		g := lo + int(math.Ceil((0.3+0.6*r.Float64())*float64(hi-lo)))
		p.targets[i] = max(1, min(g, hi)*groupSize)
	}
	return p, nil
}

// segment is the segment of group g: the number of faults that must have
// happened before g is produced.
func (p faultPlan) segment(g int) int {
	for j := len(p.bounds) - 2; j >= 0; j-- {
		if g >= p.bounds[j] {
			return j
		}
	}
	return 0
}

// processorArgs are the `creditflow run` arguments of one pipeline instance.
func processorArgs(brokers []string, group string, t stage.Topics, method vocab.Method, scorers []string, extra ...string) []string {
	args := []string{"run",
		"--brokers", strings.Join(brokers, ","),
		"--group", group,
		"--topic-trajectories", t.Trajectories,
		"--topic-scored", t.Scored,
		"--topic-samples", t.Samples,
		"--topic-dead-letters", t.DeadLetters,
		"--topic-state", t.State,
		"--topic-samples-stale", t.SamplesStale,
		"--topic-policy", t.Policy,
		"--method", string(method),
		"--metrics-addr=",
		"--log-level", "info",
		"--shutdown-timeout", "30s",
	}
	if len(scorers) > 0 {
		args = append(args, "--scorers", strings.Join(scorers, ","))
	} else {
		args = append(args, "--scorers", "local")
	}
	return append(args, extra...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// digits are replaced by N in log messages so that messages differing only
// in offsets, ports or counts are counted together.
var digits = regexp.MustCompile(`[0-9]+`)

// logSummary counts the warning and error messages of the given log files
// by message text: what went wrong inside the children during a run.
func logSummary(files ...string) map[string]int {
	out := map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 || line[0] != '{' {
				continue
			}
			var ev struct {
				Level   string `json:"level"`
				Message string `json:"message"`
			}
			if json.Unmarshal(line, &ev) != nil {
				continue
			}
			if ev.Level == "warn" || ev.Level == "error" {
				out[ev.Level+": "+digits.ReplaceAllString(ev.Message, "N")]++
			}
		}
		fh.Close()
	}
	return out
}

// progressTargets are n sample counts spread over (5 %, 90 %] of expected,
// one in each n-th of that range, in increasing order.
func progressTargets(r *rand.Rand, n, expected int) []int {
	out := make([]int, n)
	for i := range out {
		lo := float64(i) / float64(n)
		hi := float64(i+1) / float64(n)
		f := 0.05 + 0.85*(lo+r.Float64()*(hi-lo))
		out[i] = int(f * float64(expected))
	}
	return out
}

// jitter is a uniformly random duration in [lo, hi).
func jitter(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}
