package stage_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// small is a short, valid search-QA trajectory for the tiny model.
func small(prompt, id string, size, index int, eventMs int64) schemas.Trajectory {
	gold := "oslo"
	target := fmt.Sprintf(synth.Template, gold)
	a := strings.Index(target, "<answer>") + len("<answer>")
	pred := "oslo"
	return schemas.Trajectory{
		TrajectoryID: id, PromptID: prompt, GroupSize: int32(size), SampleIndex: int32(index), CreatedAtMs: eventMs,
		Prompt: synth.Tokens("question?"),
		Turns: []schemas.Turn{
			{Kind: schemas.KindSearch, Action: synth.Tokens("<search>x</search>"), Observation: synth.Tokens("<information>oslo " + id + "</information>")},
			{Kind: schemas.KindAnswer, Action: synth.Tokens("<answer>oslo</answer>")},
		},
		PredAnswer: &pred, GoldAnswers: []string{gold},
		GoldTarget: synth.Tokens(target), GoldSpan: [2]int32{int32(a), int32(a + len(gold))},
	}
}

// TestBadInputEndsInDeadLetters sends a table of malformed and misplaced
// records through both stages: each must end in the dead-letter topic with
// its own reason and its original bytes, and the good records around them
// must still become samples.
func TestBadInputEndsInDeadLetters(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Window.TimeoutMs = 10_000
		cfg.Limits.MaxRecordBytes = 64 << 10
		cfg.Limits.MaxTokens = 2000
		cfg.CommitInterval = 50 * time.Millisecond
	})
	ctx, b, cfg, prod := e.ctx, e.b, e.cfg, e.prod

	enc := func(tr schemas.Trajectory) []byte {
		v, err := schemas.Trajectories().Encode(&tr)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	type bad struct {
		key    string
		value  []byte
		reason string
	}
	nan, inf := math.NaN(), math.Inf(1)
	var table []bad
	addBad := func(reason string, mutate func(*schemas.Trajectory)) {
		tr := small("bad-"+reason, "bad-"+reason, 2, 0, 0)
		mutate(&tr)
		table = append(table, bad{key: tr.TrajectoryID, value: enc(tr), reason: reason})
	}
	good := small("ok", "ok-0", 2, 0, 0)
	table = append(table, bad{"bad-truncated", enc(good)[:40], schemas.ReasonUndecodable})
	sample := schemas.Sample{TrajectoryID: "s", PromptID: "s", Tokens: []int32{1}, LossMask: []uint8{1}, Advantages: []float32{0}}
	wrong, err := schemas.Samples().Encode(&sample)
	if err != nil {
		t.Fatal(err)
	}
	table = append(table, bad{"bad-wrong-schema", wrong, schemas.ReasonUnknownSchema})
	addBad(schemas.ReasonBadSpan, func(tr *schemas.Trajectory) { tr.GoldSpan = [2]int32{5, 500} })
	addBad(schemas.ReasonTokenOutOfRange, func(tr *schemas.Trajectory) { tr.Prompt = append(tr.Prompt, 260) })
	addBad(schemas.ReasonNonFiniteReward, func(tr *schemas.Trajectory) { tr.Reward = &nan })
	addBad(schemas.ReasonNonFiniteReward+"-inf", func(tr *schemas.Trajectory) { tr.Reward = &inf })
	table[len(table)-1].reason = schemas.ReasonNonFiniteReward
	addBad(schemas.ReasonMissingReward, func(tr *schemas.Trajectory) { tr.GoldAnswers = nil; tr.PredAnswer = nil })
	addBad(schemas.ReasonTooManyTurns, func(tr *schemas.Trajectory) {
		for len(tr.Turns) < 100 {
			tr.Turns = append([]schemas.Turn{tr.Turns[0]}, tr.Turns...)
		}
	})
	addBad(schemas.ReasonTooLarge, func(tr *schemas.Trajectory) { // 10× the record limit
		tr.Turns[0].Observation = make([]int32, 160_000)
	})
	addBad(schemas.ReasonTooManyTokens, func(tr *schemas.Trajectory) { tr.Turns[0].Observation = make([]int32, 3000) })

	var msgs []producers.Message
	put := func(key string, v []byte) {
		msgs = append(msgs, producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(key), Value: v})
	}
	put("ok", enc(good))
	for _, x := range table {
		put(x.key, x.value)
	}
	// Group-level trouble for the advantage stage:
	put("ok", enc(small("ok", "ok-0", 2, 0, 0)))               // duplicate: ignored, counted
	put("ok", enc(small("ok", "ok-1", 2, 1, 0)))               // completes "ok"
	put("ok", enc(small("ok", "ok-2", 2, 2, 0)))               // late
	put("mix", enc(small("mix", "mix-0", 2, 0, 0)))            // opens "mix" (size 2)
	put("mix", enc(small("mix", "mix-1", 3, 1, 0)))            // group_size_mismatch
	put("lonely", enc(small("lonely", "lonely-0", 3, 0, 100))) // alone in its window
	put("part", enc(small("part", "part-0", 3, 0, 200)))       // two of three: partial
	put("part", enc(small("part", "part-1", 3, 1, 200)))
	put("later", enc(small("later", "later-0", 2, 0, 20_000))) // moves event time past both windows
	put("later", enc(small("later", "later-1", 2, 1, 20_000)))
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ok-2": schemas.ReasonLate, "mix-1": schemas.ReasonGroupSizeMismatch,
		"lonely-0": schemas.ReasonGroupIncomplete, "mix-0": schemas.ReasonGroupIncomplete}
	for _, x := range table {
		want[x.key] = x.reason
	}

	e.runStages(t, local.New(cpumodel.Tiny()))

	got := map[string]string{}
	deadline := time.Now().Add(90 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		got = map[string]string{}
		for _, recs := range readTopic(t, b.Addrs(), cfg.Topics.DeadLetters) {
			for _, r := range recs {
				dl, err := schemas.DeadLetters().Decode(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				key := string(r.Key)
				if strings.HasPrefix(dl.Stage, "advantage") {
					s, err := schemas.ScoredRecords().Decode(dl.Value)
					if err != nil {
						t.Fatalf("advantage dead letter without its scored bytes: %v", err)
					}
					key = s.Trajectory.TrajectoryID
				} else {
					for _, x := range table {
						if x.key == key && string(x.value) != string(dl.Value) {
							t.Fatalf("%s: dead letter does not carry the original bytes", key)
						}
					}
				}
				var reasonHeader string
				for _, h := range r.Headers {
					if h.Key == schemas.HeaderReason {
						reasonHeader = string(h.Value)
					}
				}
				if reasonHeader != dl.Reason {
					t.Fatalf("%s: header reason %q, record reason %q", key, reasonHeader, dl.Reason)
				}
				got[key] = dl.Reason
			}
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: dead-letter reason %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("dead letters %v, want exactly %v", got, want)
	}
	samples := samplesByID(t, b.Addrs(), cfg.Topics.Samples, 6)
	for _, id := range []string{"ok-0", "ok-1", "part-0", "part-1", "later-0", "later-1"} {
		raw, ok := samples[id]
		if !ok {
			t.Fatalf("no sample for %s (samples: %d)", id, len(samples))
		}
		s, _ := schemas.Samples().Decode([]byte(raw))
		if s.Partial != strings.HasPrefix(id, "part") {
			t.Fatalf("%s: partial = %v", id, s.Partial)
		}
	}
	if len(samples) != 6 {
		t.Fatalf("%d samples, want 6", len(samples))
	}
}

// TestOversizedOutput: a trajectory whose scored record (its AttnSR step
// graphs, over 1 MB) exceeds the broker's maximum message size is
// written as chunks and read back whole. When the topic refuses even the
// chunks (its max.message.bytes below the producer's batches: a
// misconfiguration), the input ends in the dead-letter topic as too_large
// with its original bytes, and the partition keeps going.
func TestOversizedOutput(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(map[bool]string{false: "chunked", true: "refused"}[refused], func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEnv(t, 1, func(cfg *stage.Config) {
				cfg.Metrics = stage.NewMetrics(reg)
				cfg.Credit.Method = "attnsr"
				cfg.Limits.MaxTurns = 600
				if refused {
					cfg.MaxMessageBytes = 200_000 // the topics' limit; the env's producer batches up to 900,000 bytes
				}
			})
			ctx, b, cfg, prod := e.ctx, e.b, e.cfg, e.prod
			big := small("big", "big-0", 1, 0, 0)
			reward := 1.0
			big.Reward = &reward
			for len(big.Turns) < 540 { // 540 steps: 540×539/2 float64 sums below the diagonal (the sum form), over 1 MB
				big.Turns = append([]schemas.Turn{{Kind: schemas.KindTool, Action: synth.Tokens("go"), Observation: synth.Tokens("ok")}}, big.Turns...)
			}
			after := small("after", "after-0", 1, 0, 0)
			after.Reward = &reward
			var msgs []producers.Message
			for _, tr := range []schemas.Trajectory{big, after} {
				v, err := schemas.Trajectories().Encode(&tr)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(tr.TrajectoryID), Value: v})
			}
			if err := prod.Produce(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			sc, err := stage.NewScoreStage(ctx, cfg, local.New(cpumodel.Tiny()), prod)
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = sc.Run(ctx) }()
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				dead, scored := readTopic(t, b.Addrs(), cfg.Topics.DeadLetters), readTopic(t, b.Addrs(), cfg.Topics.Scored)
				if !refused && len(scored[0]) >= 2 {
					if len(dead[0]) != 0 {
						t.Fatalf("%d dead letters", len(dead[0]))
					}
					for i, id := range []string{"big-0", "after-0"} {
						s, err := schemas.ScoredRecords().Decode(scored[0][i].Value)
						if err != nil || s.Trajectory.TrajectoryID != id {
							t.Fatalf("scored record %d: %v, want %s", i, err, id)
						}
					}
					if raw := rawTopic(t, b.Addrs(), cfg.Topics.Scored); len(raw) < 3 || len(scored[0][0].Value) <= 1<<20 { // at least 2 chunks + "after"
						t.Fatalf("%d messages for a %d-byte scored record: want it chunked", len(raw), len(scored[0][0].Value))
					}
					return
				}
				if refused && len(dead[0]) > 0 && len(scored[0]) > 0 {
					dl, err := schemas.DeadLetters().Decode(dead[0][0].Value)
					if err != nil {
						t.Fatal(err)
					}
					if dl.Reason != schemas.ReasonTooLarge || string(dl.Value) != string(msgs[0].Value) {
						t.Fatalf("dead letter %s (%s), original bytes kept: %v", dl.Reason, dl.Detail, string(dl.Value) == string(msgs[0].Value))
					}
					s, _ := schemas.ScoredRecords().Decode(scored[0][0].Value)
					if s.Trajectory.TrajectoryID != "after-0" || len(scored[0]) != 1 {
						t.Fatalf("scored %d records, first %s", len(scored[0]), s.Trajectory.TrajectoryID)
					}
					// The counters say what was written: one scored record, one dead
					// letter (not the refused output).
					out := func(topic string) float64 {
						return metricWhere(t, reg, "creditflow_records_out_total", map[string]string{"stage": "score", "topic": topic})
					}
					for time.Now().Before(deadline) && out(cfg.Topics.DeadLetters) < 1 {
						time.Sleep(20 * time.Millisecond)
					}
					if got, dl := out(cfg.Topics.Scored), out(cfg.Topics.DeadLetters); got != 1 || dl != 1 {
						t.Fatalf("records_out_total: scored %v, dead letters %v; want 1 and 1", got, dl)
					}
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Fatal("no output for the oversized record")
		})
	}
}
