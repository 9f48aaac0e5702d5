package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

func textIDs(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}

// textSample is a two-turn LAPO sample over the byte vocabulary: prompt,
// a search with its observation, an answer.
func textSample(i int) (*schemas.Sample, string) {
	prompt, act0, obs0, act1 := fmt.Sprintf("Q%d: who? ", i), "search[é] ", "doc says X. ", fmt.Sprintf("answer[X%d]", i)
	var toks []int32
	var mask []uint8
	var adv []float32
	a0, a1 := 0.1*float64(i)-1, -0.05*float64(i)
	for _, part := range []struct {
		s   string
		pol bool
		a   float64
	}{{prompt, false, 0}, {act0, true, a0}, {obs0, false, 0}, {act1, true, a1}} {
		for _, id := range textIDs(part.s) {
			toks = append(toks, id)
			if part.pol {
				mask, adv = append(mask, 1), append(adv, float32(part.a))
			} else {
				mask, adv = append(mask, 0), append(adv, 0)
			}
		}
	}
	toks = append([]int32{256}, toks...) // <bos>
	mask, adv = append([]uint8{0}, mask...), append([]float32{0}, adv...)
	d := float64(i) / 10
	s := &schemas.Sample{TrajectoryID: fmt.Sprintf("traj-%02d", i), PromptID: fmt.Sprintf("prompt-%d", i/4), GroupSize: 4, SampleIndex: int32(i % 4),
		PolicyVersion: 3, CreatedAtMs: time.Now().UnixMilli(), Method: "lapo", Output: "advantages", Reward: float64(i%7) / 6,
		OutcomeAdvantage: -1, Tokens: toks, LossMask: mask, Advantages: adv,
		Turns: []schemas.TurnDiag{{Kind: "search", Eligible: true, Delta: &d, Z: &d, ZNorm: &d, Gate: 1, ProcessAdvantage: d, Advantage: a0},
			{Kind: "answer", Advantage: a1}}}
	return s, "<bos>" + prompt + act0 + obs0 + act1
}

// TestSamplesAPI writes samples (keyed by trajectory_id, as the stages do)
// and their scored records (keyed by prompt_id) to the embedded broker,
// reads them with Once and asks the samples API: the lists against the
// rewards written, a sample read back by its remembered location and one
// found by reading its partition, each equal to what was written, with S
// with/without from the scored topic.
func TestSamplesAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(broker.WithTopics(3, "samples", "scored"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sw := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: "samples", Balancer: &kafka.Murmur2Balancer{}}
	cw := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: "scored", Balancer: &kafka.Murmur2Balancer{}}
	const n = 20
	written := map[string]*schemas.Sample{}
	texts := map[string]string{}
	var sm, cm []kafka.Message
	for i := 0; i < n; i++ {
		s, text := textSample(i)
		written[s.TrajectoryID], texts[s.TrajectoryID] = s, text
		v, err := schemas.Samples().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		w0, wo0 := float64(-i), float64(-2*i)
		sc := &schemas.Scored{Method: "lapo", Direction: "backward", ScorerModel: "m",
			Trajectory: schemas.Trajectory{TrajectoryID: s.TrajectoryID, PromptID: s.PromptID, GroupSize: 4, Prompt: []int32{1},
				Turns: []schemas.Turn{{Kind: "search", Action: []int32{1}}, {Kind: "answer", Action: []int32{2}}}},
			Turns: []schemas.TurnScore{{With: &w0, Without: &wo0}, {}}}
		cv, err := schemas.ScoredRecords().Encode(sc)
		if err != nil {
			t.Fatal(err)
		}
		cm = append(cm, kafka.Message{Key: []byte(s.PromptID), Value: cv})
		sm = append(sm, kafka.Message{Key: []byte(s.TrajectoryID), Value: v})
	}
	if err := cw.WriteMessages(ctx, cm...); err != nil {
		t.Fatal(err)
	}
	if err := sw.WriteMessages(ctx, sm...); err != nil {
		t.Fatal(err)
	}
	sw.Close()
	cw.Close()

	cfg := DefaultConfig()
	cfg.KeepIDs = 5 // most lookups read the partition again
	m, err := New(Source{Brokers: b.Addrs(), Topics: []string{"samples"}, Scored: "scored"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Once(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(path string, code int, v any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != code {
			t.Fatalf("%s: %d %s, want %d", path, resp.StatusCode, body, code)
		}
		if v != nil {
			if err := json.Unmarshal(body, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	var best, worst, recent []SampleRef
	get("/api/v1/samples?order=best&limit=3", 200, &best)
	get("/api/v1/samples?order=worst&limit=3&topic=samples", 200, &worst)
	get("/api/v1/samples?limit=100", 200, &recent)
	// Rewards i%7/6: the best are i = 6, 13 (1.0) then 5, 12 (5/6); the worst 0, 7, 14 (0).
	if len(best) != 3 || best[0].Reward != 1 || best[1].Reward != 1 || best[2].Reward != 5.0/6 {
		t.Fatalf("best %+v", best)
	}
	if len(worst) != 3 || worst[0].Reward != 0 || worst[2].Reward != 0 || len(recent) != n {
		t.Fatalf("worst %+v, %d recent", worst, len(recent))
	}
	for _, r := range append(best, worst...) {
		if w := written[r.TrajectoryID]; w == nil || w.Reward != r.Reward || r.Method != "lapo" || r.Topic != "samples" || r.Partition < 0 {
			t.Fatalf("ref %+v", r)
		}
	}
	get("/api/v1/samples?order=middle", 400, nil)
	get("/api/v1/samples?limit=x", 400, nil)
	get("/api/v1/samples?topic=other", 404, nil)
	get("/api/v1/samples/no-such-id", 404, nil)

	located := 0
	for id, w := range written {
		if _, _, ok := m.agg.Locate("samples", id); ok {
			located++
		}
		var v SampleView
		get("/api/v1/samples/"+id+"?topic=samples", 200, &v)
		if v.TrajectoryID != id || len(v.Tokens) != len(w.Tokens) || len(v.Text) != len(w.Tokens) || v.Tokenizer != "bytes" {
			t.Fatalf("%s: view %+v", id, v.SampleRef)
		}
		if got := strings.Join(v.Text, ""); got != texts[id] {
			t.Fatalf("%s: text %q, want %q", id, got, texts[id])
		}
		for i := range w.Tokens {
			if v.Tokens[i] != w.Tokens[i] || v.Advantages[i] != w.Advantages[i] || v.LossMask[i] != int(w.LossMask[i]) {
				t.Fatalf("%s: token %d differs", id, i)
			}
		}
		if !v.TurnsExact || len(v.Turns) != 2 || v.Turns[0].Delta == nil || *v.Turns[0].Delta != *w.Turns[0].Delta {
			t.Fatalf("%s: turns %+v", id, v.Turns)
		}
		// The search's action starts after <bos> and the prompt.
		i := 0
		fmt.Sscanf(strings.TrimPrefix(id, "traj-"), "%d", &i)
		if a := v.Turns[0].Action[0]; a != 1+len(fmt.Sprintf("Q%d: who? ", i)) || v.PromptEnd != a {
			t.Fatalf("%s: action of turn 0 starts at %d, prompt ends at %d", id, a, v.PromptEnd)
		}
		if strings.Join(v.Text[v.Turns[0].Observation[0]:v.Turns[0].Observation[1]], "") != "doc says X. " {
			t.Fatalf("%s: observation text %q", id, v.Text[v.Turns[0].Observation[0]:v.Turns[0].Observation[1]])
		}
		if v.Turns[0].With == nil || *v.Turns[0].With != float64(-i) || *v.Turns[0].Without != float64(-2*i) {
			t.Fatalf("%s: with/without %v %v", id, v.Turns[0].With, v.Turns[0].Without)
		}
	}
	if located != 5 {
		t.Fatalf("%d ids located, want the last 5", located)
	}
}

// TestLongSampleInChunks writes a sample too large for one Kafka message
// (the producer splits it into chunks, as the stages do) between two
// ordinary ones: the monitor counts it as a sample, lists it at its first
// chunk's offset, reads it back whole, and the store finds and ranks it.
func TestLongSampleInChunks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(broker.WithTopics(1, "samples"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prod, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	long, _ := textSample(1)
	long.TrajectoryID, long.Reward = "long", 0.99
	for len(long.Tokens) < 120_000 { // about 1.5 MB: two chunks
		long.Tokens = append(long.Tokens, 'x')
		long.LossMask = append(long.LossMask, 0)
		long.Advantages = append(long.Advantages, 0)
	}
	var msgs []producers.Message
	for _, s := range []*schemas.Sample{func() *schemas.Sample { s, _ := textSample(0); return s }(), long, func() *schemas.Sample { s, _ := textSample(2); return s }()} {
		v, err := schemas.Samples().Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, producers.Message{Topic: "samples", Key: []byte(s.TrajectoryID), Value: v})
	}
	if len(msgs[1].Value) < 1<<20 {
		t.Fatalf("the long sample has %d bytes: not chunked", len(msgs[1].Value))
	}
	for _, m := range msgs {
		if err := prod.Produce(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(Source{Brokers: b.Addrs(), Topics: []string{"samples"}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := m.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Samples != 3 || sum.Undecodable != 0 {
		t.Fatalf("%d samples, %d undecodable; want 3, 0", sum.Samples, sum.Undecodable)
	}
	best := m.agg.Samples("samples", OrderBest, ByReward, 1)
	if len(best) != 1 || best[0].TrajectoryID != "long" || best[0].Offset != 1 || best[0].Tokens != len(long.Tokens) {
		t.Fatalf("best %+v", best)
	}
	v, err := m.Sample(ctx, "long", "samples")
	if err != nil || len(v.Tokens) != len(long.Tokens) || v.Offset != 1 {
		t.Fatalf("read back: %v", err)
	}
	after, err := m.Sample(ctx, "traj-02", "samples")
	if err != nil || after.Offset <= 2 { // behind both chunks
		t.Fatalf("the sample after the chunks: %+v %v", after, err)
	}
	st := m.store()
	if s, rec, err := st.Find(ctx, "samples", "long"); err != nil || len(s.Tokens) != len(long.Tokens) || rec.Offset != 1 {
		t.Fatalf("find: %v", err)
	}
	if refs, err := st.Rank(ctx, "samples", OrderBest, ByReward, 2); err != nil || len(refs) != 2 || refs[0].TrajectoryID != "long" || refs[0].Offset != 1 {
		t.Fatalf("rank: %+v %v", refs, err)
	}
}
