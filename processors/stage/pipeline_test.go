package stage_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/vocab"
)

// readTopic returns every record of topic, per partition in offset order,
// with records written as chunks put back together (as a trainer reads).
func readTopic(t *testing.T, brokers []string, topic string) map[int][]consumers.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	parts, err := consumers.Partitions(ctx, brokers, kafkasec.Config{}, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]consumers.Record{}
	for _, p := range parts {
		a := consumers.NewAssembler(consumers.ReassemblyConfig{})
		if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, p, 0, func(raw consumers.Record) error {
			r, broken := a.Add(raw)
			if len(broken) > 0 {
				t.Errorf("%s/%d: broken chunked record at offset %d: %s", topic, p, broken[0].Offset, broken[0].Detail)
			}
			if r != nil {
				out[p] = append(out[p], *r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// computeOut is docs/offline.md's output object, as `creditflow compute` writes it.
type computeOut struct {
	TrajectoryID     string  `json:"trajectory_id"`
	Partial          bool    `json:"partial"`
	Reward           float64 `json:"reward"`
	OutcomeAdvantage float64 `json:"outcome_advantage"`
	Turns            []struct {
		Eligible         bool     `json:"eligible"`
		Delta            *float64 `json:"delta"`
		Z                *float64 `json:"z"`
		ZNorm            *float64 `json:"z_norm"`
		Gate             int      `json:"gate"`
		ProcessAdvantage float64  `json:"process_advantage"`
		Advantage        *float64 `json:"advantage"`
		P                *float64 `json:"p"`
		StepReward       *float64 `json:"step_reward"`
		Weight           *float64 `json:"weight"`
	} `json:"turns"`
	AttnSR *struct {
		Confidence, Focus, Consensus, Baseline, Budget float64
	} `json:"attnsr"`
	TokenAdvantages []float64 `json:"token_advantages"`
	TokenRewards    []float64 `json:"token_rewards"`
}

// compute runs the offline command's code on the scored records of one
// partition (the EMA baseline is per partition, so is the comparison).
func compute(t *testing.T, recs []consumers.Record, cfg credit.Config) map[string]computeOut {
	t.Helper()
	var in bytes.Buffer
	for _, r := range recs {
		s, err := schemas.ScoredRecords().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(stage.ComputeInput(s))
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(b, '\n'))
	}
	var out, diag bytes.Buffer
	if err := offline.Compute(&in, &out, &diag, cfg, offline.WithTokens(true)); err != nil {
		t.Fatalf("compute: %v (%s)", err, diag.String())
	}
	res := map[string]computeOut{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var o computeOut
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		res[o.TrajectoryID] = o
	}
	return res
}

// near is bit equality: the stream and compute run the same code over the
// members in the same canonical order, so not even the last bit may differ.
func near(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

func nearPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return near(*a, *b)
}

// compareWithCompute checks every sample of the stream against the offline command.
func compareWithCompute(t *testing.T, brokers []string, topics stage.Topics, cfg credit.Config) int {
	t.Helper()
	scored := readTopic(t, brokers, topics.Scored)
	want := map[string]computeOut{}
	for _, recs := range scored {
		for k, v := range compute(t, recs, cfg) {
			want[k] = v
		}
	}
	n := 0
	for _, recs := range readTopic(t, brokers, topics.Samples) {
		for _, r := range recs {
			s, err := schemas.Samples().Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			n++
			w, ok := want[s.TrajectoryID]
			if !ok {
				t.Fatalf("sample %s has no compute output", s.TrajectoryID)
			}
			if !near(s.Reward, w.Reward) || !near(s.OutcomeAdvantage, w.OutcomeAdvantage) || s.Partial != w.Partial {
				t.Fatalf("%s: stream reward %v A_out %v partial %v, compute %v %v %v", s.TrajectoryID,
					s.Reward, s.OutcomeAdvantage, s.Partial, w.Reward, w.OutcomeAdvantage, w.Partial)
			}
			if len(s.Turns) != len(w.Turns) {
				t.Fatalf("%s: %d turns vs %d", s.TrajectoryID, len(s.Turns), len(w.Turns))
			}
			for i, d := range s.Turns {
				c := w.Turns[i]
				if cfg.Method == credit.MethodLAPO {
					if d.Eligible != c.Eligible || !nearPtr(d.Delta, c.Delta) || !nearPtr(d.Z, c.Z) || !nearPtr(d.ZNorm, c.ZNorm) ||
						int(d.Gate) != c.Gate || !near(d.ProcessAdvantage, c.ProcessAdvantage) || !nearPtr(&d.Advantage, c.Advantage) {
						t.Fatalf("%s turn %d: stream %+v, compute %+v", s.TrajectoryID, i, d, c)
					}
				} else if !nearPtr(d.P, c.P) || !nearPtr(d.StepReward, c.StepReward) || !nearPtr(d.Weight, c.Weight) {
					t.Fatalf("%s turn %d: stream p %v r %v w %v, compute %v %v %v", s.TrajectoryID, i, d.P, d.StepReward, d.Weight, c.P, c.StepReward, c.Weight)
				}
			}
			if cfg.Method == credit.MethodAttnSR {
				a, c := s.AttnSR, w.AttnSR
				if a == nil || c == nil || !near(a.Confidence, c.Confidence) || !near(a.Baseline, c.Baseline) || !near(a.Budget, c.Budget) ||
					!near(a.Focus, c.Focus) || !near(a.Consensus, c.Consensus) {
					t.Fatalf("%s: attnsr stream %+v compute %+v", s.TrajectoryID, a, c)
				}
			}
			if len(w.TokenAdvantages) != len(s.Advantages) {
				t.Fatalf("%s: %d token advantages vs %d", s.TrajectoryID, len(s.Advantages), len(w.TokenAdvantages))
			}
			for i, a := range w.TokenAdvantages {
				if s.Advantages[i] != float32(a) {
					t.Fatalf("%s token %d: stream %v compute %v", s.TrajectoryID, i, s.Advantages[i], a)
				}
			}
			if w.TokenRewards != nil {
				for i, a := range w.TokenRewards {
					if s.TokenRewards[i] != float32(a) {
						t.Fatalf("%s token reward %d: stream %v compute %v", s.TrajectoryID, i, s.TokenRewards[i], a)
					}
				}
			}
		}
	}
	return n
}

// TestPipelineLAPOMatchesCompute runs the whole pipeline (broker, scorer
// servers, both stages) and checks that every sample equals what
// `creditflow compute` gives for the scored records.
func TestPipelineLAPOMatchesCompute(t *testing.T) {
	b, err := broker.Start(broker.WithDefaultPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := demo.Defaults()
	o.Brokers, o.Groups, o.Partitions, o.Bad, o.Timeout = b.Addrs(), 4, 2, 3, 3*time.Minute
	sum, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("demo: %v (%+v)", err, sum)
	}
	if sum.Lost != 0 || sum.SamplesOut != 20 || sum.DeadLetters != 3 || sum.EligibleTurns == 0 {
		t.Fatalf("summary %+v: want 20 samples, 0 lost, 3 dead letters, eligible turns", sum)
	}
	if n := compareWithCompute(t, b.Addrs(), stage.DefaultTopics(), o.Credit); n != 20 {
		t.Fatalf("%d samples on the topic, want 20", n)
	}
	dead := readTopic(t, b.Addrs(), stage.DefaultTopics().DeadLetters)
	reasons := map[string]int{}
	for _, recs := range dead {
		for _, r := range recs {
			dl, err := schemas.DeadLetters().Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if len(dl.Value) == 0 {
				t.Fatalf("dead letter %s without the original bytes", dl.Reason)
			}
			reasons[dl.Reason]++
		}
	}
	for _, want := range []string{schemas.ReasonUndecodable, schemas.ReasonTokenOutOfRange, schemas.ReasonNonFiniteReward} {
		if reasons[want] != 1 {
			t.Fatalf("dead letters by reason %v: want one %s", reasons, want)
		}
	}
}

// randomScored makes scored AttnSR records with random step graphs, for
// exercising the advantage stage without a scorer.
func randomScored(groups, size int, seed uint64) []schemas.Scored {
	gen := synth.Default()
	gen.Shape, gen.GroupSize, gen.Seed = synth.ALFWorld, size, seed
	r := rand.New(rand.NewPCG(seed, 99))
	var out []schemas.Scored
	for g := 0; g < groups; g++ {
		for _, tr := range gen.Group(g) {
			k := len(tr.Turns)
			s := schemas.Scored{Trajectory: tr, Method: string(credit.MethodAttnSR), Turns: make([]schemas.TurnScore, k)}
			for _, layer := range []int32{0, 1} {
				lg := schemas.LayerGraph{Layer: layer, K: int32(k), AA: make([]float64, k*k), AO: make([]float64, k*k)}
				for j := 1; j < k; j++ {
					left := 1.0
					for c := 0; c < j; c++ {
						a, o := r.Float64()*left/float64(2*j), r.Float64()*left/float64(2*j)
						lg.AA[j*k+c], lg.AO[j*k+c] = a, o
					}
				}
				s.Attention = append(s.Attention, lg)
			}
			out = append(out, s)
		}
	}
	return out
}

func produceScored(t *testing.T, p *producers.Producer, topic string, recs []schemas.Scored) {
	t.Helper()
	var msgs []producers.Message
	for i := range recs {
		b, err := schemas.ScoredRecords().Encode(&recs[i])
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, producers.Message{Topic: topic, Key: []byte(recs[i].Trajectory.PromptID), Value: b})
	}
	if err := p.Produce(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

// samplesByID waits until n distinct samples are on topic and returns their bytes.
func samplesByID(t *testing.T, brokers []string, topic string, n int) map[string][]byte {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := map[string][]byte{}
		for _, recs := range readTopic(t, brokers, topic) {
			for _, r := range recs {
				id := sampleID(t, r)
				if prev, ok := out[id]; ok && !bytes.Equal(prev, r.Value) {
					t.Fatalf("two different samples for %s", id)
				}
				out[id] = r.Value
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAdvantageRestartContinuesEMA stops the advantage stage in the middle
// of a partition and starts it again: every sample — AttnSR samples carry the
// EMA baseline R̄_t — must equal an uninterrupted run's, and both must equal
// `creditflow compute` on the same records.
func TestAdvantageRestartContinuesEMA(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.Credit.Delta = 0.8 // a baseline that moves visibly from group to group
		cfg.CommitInterval = 50 * time.Millisecond
	}, "samples.restarted", "samples.straight")
	ctx, b, prod, base := e.ctx, e.b, e.prod, e.cfg
	const groups, size = 30, 3
	recs := randomScored(groups, size, 5)
	produceScored(t, prod, base.Topics.Scored, recs[:len(recs)/2])

	run := func(cfg stage.Config, until func() bool) {
		t.Helper()
		a, err := stage.NewAdvantageStage(cfg, prod)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		for deadline := time.Now().Add(60 * time.Second); !until() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Interrupted: the first half, stop, then the rest with a new process.
	cfgA := base
	cfgA.GroupID, cfgA.Topics.Samples = "restarted", "samples.restarted"
	half := len(recs) / 2
	run(cfgA, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgA.Topics.Samples)) >= half })
	produceScored(t, prod, base.Topics.Scored, recs[len(recs)/2:])
	run(cfgA, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgA.Topics.Samples)) >= len(recs) })

	// Uninterrupted, over the same topic.
	cfgB := base
	cfgB.GroupID, cfgB.Topics.Samples = "straight", "samples.straight"
	run(cfgB, func() bool { return len(samplesByIDNow(t, b.Addrs(), cfgB.Topics.Samples)) >= len(recs) })

	got := samplesByID(t, b.Addrs(), cfgA.Topics.Samples, len(recs))
	want := samplesByID(t, b.Addrs(), cfgB.Topics.Samples, len(recs))
	if len(got) != len(recs) || len(want) != len(recs) {
		t.Fatalf("restarted run has %d samples, uninterrupted %d, want %d", len(got), len(want), len(recs))
	}
	var baselines []float64
	for id, w := range want {
		if !bytes.Equal(got[id], w) {
			t.Fatalf("sample %s differs after the restart", id)
		}
		s, _ := schemas.Samples().Decode(w)
		baselines = append(baselines, s.AttnSR.Baseline)
	}
	sort.Float64s(baselines)
	if baselines[0] == baselines[len(baselines)-1] {
		t.Fatal("the EMA baseline never moved: the test would not see a reset")
	}
	cfg := base.Credit
	cfgB.Topics.Samples = cfgA.Topics.Samples
	if n := compareWithCompute(t, b.Addrs(), cfgB.Topics, cfg); n < len(recs) {
		t.Fatalf("compared %d samples", n)
	}
}

func samplesByIDNow(t *testing.T, brokers []string, topic string) map[string]bool {
	out := map[string]bool{}
	for _, recs := range readTopic(t, brokers, topic) {
		for _, r := range recs {
			out[sampleID(t, r)] = true
		}
	}
	return out
}

// sampleID is the trajectory id of a sample record, which must be keyed by
// its prompt id (a group's samples share a partition, docs/stream.md).
func sampleID(t *testing.T, r consumers.Record) string {
	t.Helper()
	s, err := schemas.Samples().Decode(r.Value)
	if err != nil {
		t.Fatalf("%s/%d offset %d: not a sample: %v", r.Topic, r.Partition, r.Offset, err)
	}
	if string(r.Key) != s.PromptID {
		t.Fatalf("sample %s is keyed %q, want its prompt id %q", s.TrajectoryID, r.Key, s.PromptID)
	}
	return s.TrajectoryID
}

// TestPipelineAttnSRMatchesCompute runs the AttnSR pipeline with step graphs
// from the scorer servers, for both outputs, and checks every sample against
// `creditflow compute` on the scored records.
func TestPipelineAttnSRMatchesCompute(t *testing.T) {
	for _, output := range vocab.Outputs {
		t.Run(string(output), func(t *testing.T) {
			b, err := broker.Start(broker.WithDefaultPartitions(2))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			o := demo.Defaults()
			o.Brokers, o.Groups, o.Partitions, o.Bad, o.Timeout = b.Addrs(), 3, 2, 0, 3*time.Minute
			o.Method = credit.MethodAttnSR
			o.Credit.Method, o.Credit.Output = credit.MethodAttnSR, output
			sum, err := demo.Run(context.Background(), o)
			if err != nil {
				t.Fatalf("demo: %v (%+v)", err, sum)
			}
			if sum.Lost != 0 || sum.SamplesOut != 15 || sum.MeanConfidence <= 0 {
				t.Fatalf("summary %+v: want 15 samples, none lost, a positive mean confidence", sum)
			}
			if n := compareWithCompute(t, b.Addrs(), stage.DefaultTopics(), o.Credit); n != 15 {
				t.Fatalf("%d samples on the topic, want 15", n)
			}
			for _, recs := range readTopic(t, b.Addrs(), stage.DefaultTopics().Samples) {
				for _, r := range recs {
					s, _ := schemas.Samples().Decode(r.Value)
					if (output == credit.OutputPPO) != (s.TokenRewards != nil) {
						t.Fatalf("%s output: token rewards present = %v", output, s.TokenRewards != nil)
					}
				}
			}
		})
	}
}

// TestAdvantageMatchesComputeInAnyArrivalOrder sends each group's members in
// reverse sample order, with rewards whose float64 sums depend on the order
// they are added in: the stream's samples must still equal `creditflow
// compute` on the topic's order to the bit.
func TestAdvantageMatchesComputeInAnyArrivalOrder(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.Credit.Delta = 0.8
	}, "samples.order")
	const groups, size = 12, 5
	recs := randomScored(groups, size, 11)
	r := rand.New(rand.NewPCG(11, 5))
	for i := range recs {
		v := r.Float64() * math.Pow(10, float64(r.IntN(13)-6))
		recs[i].Trajectory.Reward = &v
	}
	for g := 0; g < groups; g++ {
		slices.Reverse(recs[g*size : (g+1)*size])
	}
	produceScored(t, e.prod, e.cfg.Topics.Scored, recs)
	cfg := e.cfg
	cfg.GroupID, cfg.Topics.Samples = "order", "samples.order"
	a, err := stage.NewAdvantageStage(cfg, e.prod)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	got := samplesByID(t, e.b.Addrs(), cfg.Topics.Samples, len(recs))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d samples, want %d", len(got), len(recs))
	}
	if n := compareWithCompute(t, e.b.Addrs(), cfg.Topics, cfg.Credit); n != len(recs) {
		t.Fatalf("compared %d samples, want %d", n, len(recs))
	}
}
