package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/vocab"
)

// benchEnv is what every phase of one bench run shares: the broker, the
// instant scorer's client, the progress line.
type benchEnv struct {
	brokers    []string
	child      *childBroker // the embedded broker's process; nil with --brokers
	run        string       // this bench run's prefix of topic and group names
	partitions int
	timeout    time.Duration // per phase
	scorer     *client.Client
	log        zerolog.Logger
	prog       *benchProgress
	seq        atomic.Int64
	// --profile-phase: profile the first run of this phase into cpuProfile.
	profilePhase, cpuProfile string
	profiled                 bool
	compression              string // every producer's codec (--compression)
}

// name returns a topic or group name no earlier phase, nor an earlier bench
// run on the same cluster, used.
func (e *benchEnv) name(what string) string {
	return fmt.Sprintf("bench.%s.%d.%s", e.run, e.seq.Add(1), what)
}

// topics creates a fresh set of pipeline topics with p partitions.
func (e *benchEnv) topics(ctx context.Context, p int) (stage.Topics, error) {
	base := e.name("")
	t := stage.Topics{Trajectories: base + "trajectories", Scored: base + "scored", Samples: base + "samples",
		DeadLetters: base + "dead-letters", State: base + "state", SamplesStale: base + "samples-stale"}
	cfg := stage.Config{Topics: t}
	specs := cfg.TopicSpecs(p)
	for i := range specs {
		specs[i].ReplicationFactor = 0 // the broker's default
	}
	return t, producers.EnsureTopics(ctx, e.brokers, benchSec, specs...)
}

// drop deletes topics a finished run wrote and nothing reads any more.
// The embedded broker keeps every topic in its memory, so without it each
// run would grow the broker past all earlier runs' outputs, and later phases
// would pay more for that than earlier ones. A failure is only reported: it
// costs memory, not correctness.
func (e *benchEnv) drop(ctx context.Context, topics ...string) {
	tr, err := benchSec.Transport()
	if err == nil {
		defer tr.CloseIdleConnections()
		client := &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr, Timeout: 10 * time.Second}
		var resp *kafka.DeleteTopicsResponse
		if resp, err = client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics}); err == nil {
			for _, terr := range resp.Errors {
				err = errors.Join(err, terr)
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		cmdutil.Stderrf("bench: could not delete the finished topics %s: %v", strings.Join(topics, ", "), err)
	}
}

// all is every topic of a pipeline topic set.
func all(t stage.Topics) []string {
	return []string{t.Trajectories, t.Scored, t.Samples, t.DeadLetters, t.State, t.SamplesStale}
}

// produceAll writes keyed values to topic, in order, 256 to a call.
func (e *benchEnv) produceAll(ctx context.Context, topic, schema string, keys, values [][]byte) error {
	p, err := producers.New(e.producerConfig())
	if err != nil {
		return err
	}
	defer p.Close()
	hdr := []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schema)}}
	for i := 0; i < len(values); i += 256 {
		var msgs []producers.Message
		for j := i; j < min(i+256, len(values)); j++ {
			msgs = append(msgs, producers.Message{Topic: topic, Key: keys[j], Value: values[j], Headers: hdr})
		}
		if err := p.Produce(ctx, msgs...); err != nil {
			return err
		}
	}
	return nil
}

// readAll reads every record of topic (all partitions), grouped by key in
// order of first appearance.
func (e *benchEnv) readAll(ctx context.Context, topic string) (keys, values [][]byte, err error) {
	parts, err := consumers.Partitions(ctx, e.brokers, benchSec, topic)
	if err != nil {
		return nil, nil, err
	}
	byKey := map[string][][]byte{}
	var order []string
	for _, p := range parts {
		_, err := consumers.ReadPartitionRange(ctx, e.brokers, benchSec, topic, p, -2, func(r consumers.Record) error {
			k := string(r.Key)
			if _, ok := byKey[k]; !ok {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], r.Value)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	for _, k := range order {
		for _, v := range byKey[k] {
			keys = append(keys, []byte(k))
			values = append(values, v)
		}
	}
	return keys, values, nil
}

// counts samples a phase: records read, outputs acknowledged, and outputs
// that went wrong (dead letters, refused writes).
type counts func() (in, out, bad int)

// rate is a phase's throughput: records per second of wall-clock time, and
// the CPU time this process (stages, clients) and the embedded broker's
// process spent per record, over one or more runs.
type rate struct {
	PerS        float64
	CPUUsPerRec float64
	records     int
	seconds     float64
	cpuUs       float64
}

// plus pools two runs: total records over total time (a short phase's lucky
// burst does not count more than a long phase's steady rate).
func (r rate) plus(o rate) rate {
	r.records += o.records
	r.seconds += o.seconds
	r.cpuUs += o.cpuUs
	if r.seconds > 0 && r.records > 0 {
		r.PerS = float64(r.records) / r.seconds
		r.CPUUsPerRec = r.cpuUs / float64(r.records)
	}
	return r
}

// measure waits until want outputs are acknowledged and returns the rate
// of the whole phase: want outputs over the time from the last poll (every
// 2 ms) before the first record was read to the first poll at which the
// last output was acknowledged, and the process CPU time per output over the
// same span. It leaves out what comes before the first read (joining the
// group, a stage loading its state) and nothing after it: a stage that reads
// ahead of what it has written (the advantage stage holds up to 512 groups
// per partition in flight, more than a 2,000-record run has) is charged for
// all of its work. A window over the 10%–90% acknowledgements, which the
// bench used before, caught such a stage draining a backlog of finished
// samples and left out half of its CPU.
func (e *benchEnv) measure(ctx context.Context, phase string, want int, c counts) (rate, error) {
	e.prog.start(phase, want)
	defer e.prog.stop()
	if e.profilePhase == phase && e.cpuProfile != "" && !e.profiled {
		// --profile-phase: the CPU profile covers this phase's first run only.
		if stopProfile, err := startCPUProfile(e.cpuProfile); err == nil {
			e.profiled = true
			defer stopProfile()
		}
	}
	var t0 time.Time
	var cpu0 time.Duration
	deadline := time.Now().Add(e.timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	prevT, prevCPU := time.Now(), e.cpuTime()
	for {
		in, out, bad := c()
		now := time.Now()
		e.prog.set(in, out+bad)
		if t0.IsZero() {
			if in > 0 || out+bad >= want {
				t0, cpu0 = prevT, prevCPU // the last poll before the first read
			} else {
				// CPU time is read at each poll only until the phase starts:
				// reading the broker's from /proc costs about 0.1 ms, 5% of a
				// core at a poll every 2 ms.
				prevT, prevCPU = now, e.cpuTime()
			}
		}
		if out+bad >= want {
			if bad > 0 {
				return rate{}, fmt.Errorf("%s: %d of %d outputs were dead letters or refused by the broker", phase, bad, want)
			}
			return rate{}.plus(rate{records: out, seconds: now.Sub(t0).Seconds(),
				cpuUs: float64((e.cpuTime() - cpu0).Microseconds())}), nil
		}
		if now.After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return rate{}, ctx.Err()
		case <-tick.C:
		}
	}
	in, out, bad := c()
	return rate{}, fmt.Errorf("%s: timed out after %s with %d of %d records read, %d outputs acknowledged, %d bad", phase, e.timeout, in, want, out, bad)
}

// passthrough is the floor: replicas members of a consumer group read in
// and produce the same bytes to out through the project's consumers and
// producers packages, with the stages' settings (fetch buffer, 256-record
// produce batches of what is ready, commits every 500 ms). phase names the
// run ("passthrough" over trajectories, "passthrough-scored" over scored
// records) in the progress line, the profile's labels and --profile-phase.
//
// With fill, the replicas first settle in their group and fill then writes
// the input (so that no run measures a rebalance); without, the input is
// already there.
//
// The output topic is deleted when the run is over.
func (e *benchEnv) passthrough(outer context.Context, phase, in, out string, buffer, replicas, want int, fill func() error) (rate, error) {
	return e.mover(outer, phase, in, out, buffer, replicas, want, fill, nil)
}

// mover is passthrough with each record's output chosen by write (nil: the
// record itself): a floor phase writes one of its stage's output records
// per record (floor.go).
func (e *benchEnv) mover(outer context.Context, phase, in, out string, buffer, replicas, want int, fill func() error,
	write func(msgs []producers.Message, rec consumers.Record, seq int) []producers.Message) (rate, error) {
	ctx, cancel := context.WithCancel(outer)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait(); e.drop(outer, out) }()
	if err := producers.EnsureTopics(ctx, e.brokers, benchSec, producers.TopicSpec{Name: out, Partitions: e.partitions}); err != nil {
		return rate{}, err
	}
	var nIn, nOut atomic.Int64
	group := e.name("passthrough")
	commitEvery := stage.DefaultConfig().CommitInterval
	for r := 0; r < replicas; r++ {
		prod, err := producers.New(e.producerConfig())
		if err != nil {
			return rate{}, err
		}
		g, err := consumers.NewGroup(consumers.Config{Brokers: e.brokers, GroupID: group, Topics: []string{in},
			StartAt: "earliest", Buffer: buffer})
		if err != nil {
			return rate{}, err
		}
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("phase", phase), func(ctx context.Context) {
			defer wg.Done()
			defer prod.Close()
			defer g.Close()
			_ = g.Run(ctx, func(ctx context.Context, c consumers.Claim, commit consumers.CommitFunc) error {
				var last time.Time
				seq := 0
				for rec := range c.Records {
					nIn.Add(1)
					batch := []consumers.Record{rec}
				gather:
					for len(batch) < 256 {
						select {
						case r, ok := <-c.Records:
							if !ok {
								break gather
							}
							nIn.Add(1)
							batch = append(batch, r)
						default:
							break gather
						}
					}
					msgs := make([]producers.Message, 0, len(batch))
					for _, r := range batch {
						if write == nil {
							msgs = append(msgs, producers.Message{Topic: out, Key: r.Key, Value: r.Value, Headers: r.Headers})
						} else {
							msgs = write(msgs, r, seq)
							seq++
						}
					}
					if err := prod.Produce(ctx, msgs...); err != nil {
						return nil // ctx ended
					}
					nOut.Add(int64(len(batch)))
					if now := time.Now(); now.Sub(last) >= commitEvery {
						if commit(ctx, batch[len(batch)-1].Offset+1) == nil {
							last = now
						}
					}
				}
				return nil
			})
		})
	}
	if fill != nil {
		if !cmdutil.WaitSettled(ctx, e.brokers, replicas, e.timeout, group) {
			return rate{}, errors.New("passthrough: the consumer group did not settle")
		}
		go func() { _ = fill() }()
	}
	return e.measure(ctx, phase, want, func() (int, int, int) { return int(nIn.Load()), int(nOut.Load()), 0 })
}

// stageRun is one or more replicas of a stage running on their own metrics.
type stageRun struct {
	reg    *countingRegistry
	cfg    stage.Config
	cancel context.CancelFunc
	wg     sync.WaitGroup
	adv    []*stage.AdvantageStage
}

func (s *stageRun) stop() { s.cancel(); s.wg.Wait() }

// stageCounts reads the stage's own counters.
func (s *stageRun) counts(name, outTopic string) counts {
	return func() (int, int, int) {
		mfs := s.reg.gather()
		in := promreg.Sum(mfs, "creditflow_records_in_total", map[string]string{"stage": name})
		out := promreg.Sum(mfs, "creditflow_records_out_total", map[string]string{"stage": name, "topic": outTopic})
		dead := promreg.Sum(mfs, "creditflow_records_out_total", map[string]string{"stage": name, "topic": s.cfg.Topics.DeadLetters})
		bad := promreg.Sum(mfs, "creditflow_unwritable_records_total", map[string]string{"stage": name})
		return int(in), int(out), int(dead + bad)
	}
}

// startStage starts replicas of the score or advantage stage, each with
// its own producer, as `creditflow run --stage` would.
func (e *benchEnv) startStage(ctx context.Context, which string, method vocab.Method, topics stage.Topics, maxTokens, replicas int, tune func(*stage.Config)) (*stageRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &stageRun{reg: newCountingRegistry(prometheus.NewRegistry(),
		"creditflow_records_in_total", "creditflow_records_out_total", "creditflow_unwritable_records_total"), cancel: cancel}
	cfg := stage.DefaultConfig()
	cfg.Brokers = e.brokers
	cfg.GroupID = e.name("creditflow")
	cfg.Topics = topics
	cfg.Credit.Method = method
	cfg.Logger = e.log
	cfg.Metrics = stage.NewMetrics(s.reg)
	cfg.Limits.MaxTokens = max(cfg.Limits.MaxTokens, maxTokens+1024)
	cfg.Compression = e.codec()
	if tune != nil {
		tune(&cfg)
	}
	s.cfg = cfg
	for r := 0; r < replicas; r++ {
		prod, err := producers.New(e.producerConfig())
		if err != nil {
			s.stop()
			return nil, err
		}
		var run func(context.Context) error
		switch which {
		case "score":
			st, err := stage.NewScoreStage(ctx, cfg, e.scorer, prod)
			if err != nil {
				prod.Close()
				s.stop()
				return nil, err
			}
			run = st.Run
		default:
			st, err := stage.NewAdvantageStage(cfg, prod)
			if err != nil {
				prod.Close()
				s.stop()
				return nil, err
			}
			s.adv = append(s.adv, st)
			run = st.Run
		}
		s.wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("phase", which), func(ctx context.Context) {
			defer s.wg.Done()
			defer prod.Close()
			_ = run(ctx)
		})
	}
	return s, nil
}

// openGroups sums the open groups the advantage replicas reported at their
// last checkpoint.
func (s *stageRun) openGroups() int {
	n := 0
	for _, a := range s.adv {
		for _, p := range a.Positions() {
			n += p.OpenGroups
		}
	}
	return n
}

// cpuTime is the user plus system CPU time so far of this process and of
// the embedded broker's (the instant scorer, which stands in for GPU pods on
// other machines, is left out).
func (e *benchEnv) cpuTime() time.Duration {
	t := cpuTime()
	if e.child != nil {
		if c, err := e.child.cpu(); err == nil {
			t += c
		}
	}
	return t
}

// cpuTime is the user plus system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// producerConfig is the configuration of every producer in the bench (the
// input's writer, the passthrough's, the stages'): the stages' own
// (stage.Config.ProducerConfig: the run's compression, lz4 by default,
// batches under the message limit), so that every phase compresses, batches
// and fetches alike, as the stages do when deployed.
func (e *benchEnv) producerConfig() producers.Config {
	c := stage.DefaultConfig()
	c.Brokers, c.Security, c.Compression = e.brokers, benchSec, e.codec()
	return c.ProducerConfig()
}

// codec is the run's producer compression: --compression, or the stages'
// default where a test built the environment without one.
func (e *benchEnv) codec() string {
	if e.compression == "" {
		return stage.DefaultCompression
	}
	return e.compression
}
