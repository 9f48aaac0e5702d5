package stage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// agentTrajectory is a 128k-token agent trajectory for the tiny model's byte
// tokenizer: a prompt, tool turns with long reasoning and long tool output,
// one search turn (the LAPO-eligible one) and the answer. About 100k of its
// tokens are policy tokens, so even the trajectory is larger than one
// producer batch (900,000 bytes under Kafka's default 1 MiB limit).
func agentTrajectory(i int, tokens int) schemas.Trajectory {
	r := rand.New(rand.NewPCG(128, uint64(i)))
	words := []string{"the", "tool", "returned", "a", "list", "of", "files", "and", "then", "i", "should", "check", "kyoto", "oslo", "grep", "result"}
	text := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()[:n]
	}
	t := schemas.Trajectory{
		TrajectoryID: fmt.Sprintf("long-%d", i), PromptID: "long", GroupSize: 2, SampleIndex: int32(i),
		PolicyVersion: 1, CreatedAtMs: 1_767_225_600_000 + int64(i),
		Prompt: synth.Tokens("<|user|> Fix the failing build, then tell me which city the config names. <|assistant|>"),
	}
	used := len(t.Prompt) + 64
	for used < tokens-6000 {
		a := synth.Tokens("<think>" + text(3000) + "</think><tool>" + text(40) + "</tool>")
		o := synth.Tokens("<output>" + text(700) + "</output>")
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindTool, Action: a, Observation: o})
		used += len(a) + len(o)
	}
	// The search turn: whether it found the answer decides its Δ.
	found := "the config names kyoto"
	if i%2 == 1 {
		found = "nothing relevant"
	}
	pred := "kyoto"
	if i%2 == 1 {
		pred = "oslo"
	}
	ans := synth.Tokens("<answer>" + pred + "</answer>")
	used -= 64
	s := synth.Tokens("<search>" + text(30) + "</search>")
	fill := tokens - used - len(s) - len(ans) - len("<information>") - len("</information>") - len(found)
	o := synth.Tokens("<information>" + text(fill) + found + "</information>")
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindSearch, Action: s, Observation: o})
	t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: ans})
	t.PredAnswer, t.GoldAnswers = &pred, []string{"kyoto"}
	target := fmt.Sprintf(synth.Template, "kyoto")
	a := strings.Index(target, "<answer>") + len("<answer>")
	t.GoldTarget, t.GoldSpan = synth.Tokens(target), [2]int32{int32(a), int32(a + len("kyoto"))}
	n := 0
	for _, tu := range t.Turns {
		n += len(tu.Action)
	}
	t.RolloutLogprobs = make([]float32, n)
	for k := range t.RolloutLogprobs {
		t.RolloutLogprobs[k] = -float32(r.ExpFloat64())
	}
	return t
}

func tokenCount(t *schemas.Trajectory) int {
	n := len(t.Prompt)
	for _, tu := range t.Turns {
		n += len(tu.Action) + len(tu.Observation)
	}
	return n
}

// TestLongTrajectoryEndToEnd sends a group of two 128k-token trajectories
// through both stages on an embedded broker with Kafka's default settings
// (1 MiB messages): trajectories, scored records and samples are all
// larger than one message and travel as chunks. The trainer-side samples
// must equal `creditflow compute` on the scored records.
//
// The scorer is the real CPU reference model, loaded from a checkpoint
// folder like any Hugging Face model: the tiny model's weights with
// max_position_embeddings 4,096. Each LAPO row is left-truncated to that
// context, exactly as a production scorer cuts a context longer than its
// model's (counted in Scored.truncations), and the trajectory has one
// eligible turn: two rows per trajectory. At the built-in 32,768-token
// context one row took 2 min 39 s here (attention is quadratic: 0.8 s at
// 2k, 8.5 s at 8k tokens), too slow for a test.
func TestLongTrajectoryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("scores 4 rows of 32k tokens on the CPU model")
	}
	b, err := broker.Start() // Kafka defaults: message.max.bytes 1048588
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := stage.DefaultConfig()
	cfg.Brokers = b.Addrs()
	cfg.CommitInterval = 100 * time.Millisecond
	if err := producers.EnsureTopics(ctx, cfg.Brokers, kafkasec.Config{}, cfg.TopicSpecs(1)...); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(cfg.ProducerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	const tokens = 131072
	var msgs []producers.Message
	for i := 0; i < 2; i++ {
		tr := agentTrajectory(i, tokens)
		if n := tokenCount(&tr); n != tokens {
			t.Fatalf("trajectory has %d tokens, want %d", n, tokens)
		}
		v, err := schemas.Trajectories().Encode(&tr)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) <= 900_000 {
			t.Fatalf("trajectory record is %d bytes: the test needs one over a producer batch (900,000 bytes)", len(v))
		}
		msgs = append(msgs, producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(tr.PromptID), Value: v})
	}
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	sc, err := stage.NewScoreStage(ctx, cfg, local.New(shortContextModel(t, 4096)), prod)
	if err != nil {
		t.Fatal(err)
	}
	adv, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sc.Run(ctx) }()
	go func() { _ = adv.Run(ctx) }()
	for len(samplesByIDNow(t, cfg.Brokers, cfg.Topics.Samples)) < 2 {
		if ctx.Err() != nil {
			t.Fatal("no samples within 5 minutes")
		}
		if dl := rawTopic(t, cfg.Brokers, cfg.Topics.DeadLetters); len(dl) > 0 {
			d, _ := schemas.DeadLetters().Decode(assemble(t, dl)[0].Value)
			t.Fatalf("dead letter: %s %s", d.Reason, d.Detail)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("2 trajectories of %d tokens: samples after %s", tokens, time.Since(started).Round(time.Millisecond))

	// Every message on every topic fits Kafka's default limit; the three
	// record kinds travel as chunks.
	for _, topic := range []string{cfg.Topics.Trajectories, cfg.Topics.Scored, cfg.Topics.Samples} {
		raw := rawTopic(t, cfg.Brokers, topic)
		chunks := 0
		for _, r := range raw {
			if len(r.Value) > 1<<20 {
				t.Fatalf("%s: message of %d bytes", topic, len(r.Value))
			}
			if _, ok, _ := chunk.Parse(r.Headers); ok {
				chunks++
			}
		}
		if chunks < 4 {
			t.Fatalf("%s: %d chunk messages of %d, want the records chunked", topic, chunks, len(raw))
		}
	}
	if dl := rawTopic(t, cfg.Brokers, cfg.Topics.DeadLetters); len(dl) != 0 {
		d, _ := schemas.DeadLetters().Decode(assemble(t, dl)[0].Value)
		t.Fatalf("%d dead letters, first: %s %s", len(dl), d.Reason, d.Detail)
	}
	for _, r := range readTopic(t, cfg.Brokers, cfg.Topics.Scored)[0] {
		s, err := schemas.ScoredRecords().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if s.Truncations == 0 || s.Turns[len(s.Turns)-2].Delta == nil {
			t.Fatalf("scored %s: truncations %d, search turn Δ %v", s.Trajectory.TrajectoryID, s.Truncations, s.Turns[len(s.Turns)-2].Delta)
		}
	}
	for _, r := range readTopic(t, cfg.Brokers, cfg.Topics.Samples)[0] {
		s, err := schemas.Samples().Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Tokens) != tokens || len(s.Advantages) != tokens || len(r.Value) <= 1<<20 {
			t.Fatalf("sample %s: %d tokens, %d advantages, %d bytes", s.TrajectoryID, len(s.Tokens), len(s.Advantages), len(r.Value))
		}
	}
	if n := compareWithCompute(t, cfg.Brokers, cfg.Topics, cfg.Credit); n != 2 {
		t.Fatalf("compared %d samples, want 2", n)
	}
	// A Python trainer (confluent-kafka, examples/python) reads them too.
	if py := pyenvtest.Optional(t); py != "" {
		dir, _ := filepath.Abs("../../examples/python")
		tr := exec.CommandContext(ctx, py, "trainer.py", "--brokers", strings.Join(cfg.Brokers, ","),
			"--topic", cfg.Topics.Samples, "--expect", "2", "--batch", "2", "--timeout", "60")
		tr.Dir = dir
		tr.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "..", "..", "python")) // the package from the checkout
		out, err := tr.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"samples": 2`) || !strings.Contains(string(out), `"invalid": 0`) {
			t.Fatalf("python trainer: %v\n%s", err, out)
		}
	}
}

// rawTopic reads partition 0 of topic as it is on the broker (chunks not
// put together).
func rawTopic(t *testing.T, brokers []string, topic string) []consumers.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []consumers.Record
	if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, 0, 0, func(r consumers.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// assemble puts chunked records back together, as a trainer does.
func assemble(t *testing.T, raw []consumers.Record) []consumers.Record {
	t.Helper()
	a := consumers.NewAssembler(consumers.ReassemblyConfig{})
	var out []consumers.Record
	for _, r := range raw {
		rec, broken := a.Add(r)
		if len(broken) > 0 {
			t.Fatalf("broken chunked record at offset %d: %s %s", broken[0].Offset, broken[0].Reason, broken[0].Detail)
		}
		if rec != nil {
			out = append(out, *rec)
		}
	}
	return out
}

// shortContextModel is the tiny model written as a checkpoint folder with
// max_position_embeddings set to n, and loaded back.
func shortContextModel(t *testing.T, n int) *cpumodel.Model {
	t.Helper()
	dir := t.TempDir()
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hf map[string]any
	if err := json.Unmarshal(raw, &hf); err != nil {
		t.Fatal(err)
	}
	hf["max_position_embeddings"] = n
	if raw, err = json.Marshal(hf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := cpumodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Info().MaxContext != n {
		t.Fatalf("model context %d, want %d", m.Info().MaxContext, n)
	}
	return m
}

// TestBrokenChunksEndInDeadLetters: a chunked trajectory with a missing
// chunk and one with a corrupted chunk become dead letters with their
// reasons and the bytes received; chunked and plain good members of a group
// around them still become samples, and the score stage's commit reaches
// the end of the topic (broken records do not hold it once their dead
// letters are written).
func TestBrokenChunksEndInDeadLetters(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) { cfg.CommitInterval = 50 * time.Millisecond })
	ctx, cfg, prod := e.ctx, e.cfg, e.prod
	enc := func(tr schemas.Trajectory) producers.Message {
		v, err := schemas.Trajectories().Encode(&tr)
		if err != nil {
			t.Fatal(err)
		}
		return producers.Message{Topic: cfg.Topics.Trajectories, Key: []byte(tr.PromptID), Value: v}
	}
	good0, good1 := enc(small("ok", "ok-0", 2, 0, 0)), enc(small("ok", "ok-1", 2, 1, 1))
	gap, corrupt := enc(small("gap", "gap-0", 2, 0, 2)), enc(small("bad", "bad-0", 2, 0, 3))
	goodChunks := producers.Split(good0, 100)
	gapChunks := producers.Split(gap, 100)
	badChunks := producers.Split(corrupt, 100)
	if len(goodChunks) < 3 || len(gapChunks) < 3 || len(badChunks) < 3 {
		t.Fatal("records too small to chunk in three")
	}
	flipped := append([]byte(nil), badChunks[1].Value...)
	flipped[3] ^= 0xff
	badChunks[1].Value = flipped
	var msgs []producers.Message
	msgs = append(msgs, goodChunks[0], gapChunks[0])
	msgs = append(msgs, goodChunks[1:]...)
	msgs = append(msgs, gapChunks[2:]...) // chunk 1 missing
	msgs = append(msgs, badChunks...)
	msgs = append(msgs, good1)
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	sc, err := stage.NewScoreStage(runCtx, cfg, local.New(cpumodel.Tiny()), prod)
	if err != nil {
		t.Fatal(err)
	}
	adv, err := stage.NewAdvantageStage(cfg, prod)
	if err != nil {
		t.Fatal(err)
	}
	scoreDone := make(chan error, 1)
	go func() { scoreDone <- sc.Run(runCtx) }()
	go func() { _ = adv.Run(runCtx) }()

	deadline := time.Now().Add(90 * time.Second)
	var dead []schemas.DeadLetter
	for {
		dead = dead[:0]
		for _, r := range readTopic(t, cfg.Brokers, cfg.Topics.DeadLetters)[0] {
			d, err := schemas.DeadLetters().Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			dead = append(dead, *d)
		}
		if (len(dead) >= 2 && len(samplesByIDNow(t, cfg.Brokers, cfg.Topics.Samples)) >= 2) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := len(samplesByIDNow(t, cfg.Brokers, cfg.Topics.Samples)); n != 2 {
		t.Fatalf("%d samples, want 2 (ok-0 chunked, ok-1 plain)", n)
	}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	byReason := map[string]schemas.DeadLetter{}
	for _, d := range dead {
		byReason[d.Reason] = d
	}
	g, ok := byReason[schemas.ReasonChunkIncomplete]
	if !ok || string(g.Key) != "gap" || !bytes.Equal(g.Value, gapChunks[0].Value) || g.Stage != "score" {
		t.Fatalf("chunk_incomplete dead letter: %+v", g.Reason)
	}
	c, ok := byReason[schemas.ReasonChunkCorrupt]
	if !ok || string(c.Key) != "bad" || len(c.Value) != len(corrupt.Value) || bytes.Equal(c.Value, corrupt.Value) {
		t.Fatalf("chunk_corrupt dead letter: %q, %d bytes", c.Reason, len(c.Value))
	}
	// Stop: the score stage makes its last commit, which no broken record holds back.
	stop()
	if err := <-scoreDone; err != nil {
		t.Fatal(err)
	}
	cs, err := consumers.CommittedOffsets(ctx, cfg.Brokers, kafkasec.Config{}, cfg.GroupID+".score", cfg.Topics.Trajectories, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if end := int64(len(msgs)); cs[0] != end {
		t.Fatalf("the score stage committed %d, want the end of the topic (%d)", cs[0], end)
	}
}

// TestChunkedRecordSurvivesRestart stops the advantage stage while a
// chunked scored record is half read and other groups around it are done:
// its commit must stay at the record's first chunk, so that the next
// process reads the whole record and emits its group. Every sample equals
// `creditflow compute` on the scored records.
func TestChunkedRecordSurvivesRestart(t *testing.T) {
	e := newEnv(t, 1, func(cfg *stage.Config) {
		cfg.Credit.Method = credit.MethodAttnSR
		cfg.CommitInterval = 50 * time.Millisecond
	})
	ctx, cfg, prod := e.ctx, e.cfg, e.prod
	recs := randomScored(2, 2, 11) // groups q000000 (A) and q000001 (B), two members each
	msg := func(i int) producers.Message {
		v, err := schemas.ScoredRecords().Encode(&recs[i])
		if err != nil {
			t.Fatal(err)
		}
		return producers.Message{Topic: cfg.Topics.Scored, Key: []byte(recs[i].Trajectory.PromptID), Value: v}
	}
	a0 := producers.Split(msg(0), 500)
	if len(a0) < 3 {
		t.Fatalf("%d chunks, want at least 3", len(a0))
	}
	run := func(until func() bool) {
		t.Helper()
		adv, err := stage.NewAdvantageStage(cfg, prod)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- adv.Run(rctx) }()
		for deadline := time.Now().Add(60 * time.Second); !until() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	samples := func() int { return len(samplesByIDNow(t, cfg.Brokers, cfg.Topics.Samples)) }

	// Offsets: A0 chunks 0,1 | B0 | B1 — B completes, A0 is half read.
	first := append([]producers.Message{}, a0[:2]...)
	first = append(first, msg(2), msg(3))
	if err := prod.Produce(ctx, first...); err != nil {
		t.Fatal(err)
	}
	run(func() bool { return samples() >= 2 })
	if n := samples(); n != 2 {
		t.Fatalf("%d samples after the first run, want group B's 2", n)
	}
	cs, err := consumers.CommittedOffsets(ctx, cfg.Brokers, kafkasec.Config{}, cfg.GroupID+".advantage", cfg.Topics.Scored, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if cs[0] != 0 {
		t.Fatalf("committed %d with a record started at offset 0 unfinished; want 0", cs[0])
	}

	// The rest of A0, then A1: a new process must emit group A.
	rest := append([]producers.Message{}, a0[2:]...)
	rest = append(rest, msg(1))
	if err := prod.Produce(ctx, rest...); err != nil {
		t.Fatal(err)
	}
	run(func() bool { return samples() >= 4 })
	if n := samples(); n != 4 {
		t.Fatalf("%d samples after the restart, want 4", n)
	}
	if n := compareWithCompute(t, cfg.Brokers, cfg.Topics, cfg.Credit); n < 4 {
		t.Fatalf("compared %d samples", n)
	}
}
