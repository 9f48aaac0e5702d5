package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/processors/stage"
)

// ownSample is a sample as decoded here, with goavro and the schema file
// (not the project's codecs).
type ownSample struct {
	id         string
	reward     float64
	tokens     []int32
	mask       []byte
	advantages []float32
	deltas     []*float64 // per turn
	advs       []float64  // per turn
}

func ownSamples(t *testing.T, values [][]byte) map[string]*ownSample {
	t.Helper()
	schema, err := os.ReadFile("../../schemas/sample.avsc")
	if err != nil {
		t.Fatal(err)
	}
	codec, err := goavro.NewCodec(string(schema))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ownSample{}
	for _, v := range values {
		native, _, err := codec.NativeFromBinary(v[10:])
		if err != nil {
			t.Fatal(err)
		}
		m := native.(map[string]any)
		s := &ownSample{id: m["trajectory_id"].(string), reward: m["reward"].(float64), mask: m["loss_mask"].([]byte)}
		tb := m["tokens"].([]byte)
		for i := 0; i+4 <= len(tb); i += 4 {
			s.tokens = append(s.tokens, int32(binary.LittleEndian.Uint32(tb[i:])))
		}
		ab := m["advantages"].(map[string]any)["bytes"].([]byte)
		for i := 0; i+4 <= len(ab); i += 4 {
			s.advantages = append(s.advantages, math.Float32frombits(binary.LittleEndian.Uint32(ab[i:])))
		}
		for _, tr := range m["turns"].([]any) {
			tm := tr.(map[string]any)
			var d *float64
			if u, ok := tm["delta"].(map[string]any); ok {
				x := u["double"].(float64)
				d = &x
			}
			s.deltas = append(s.deltas, d)
			s.advs = append(s.advs, tm["advantage"].(float64))
		}
		out[s.id] = s
	}
	return out
}

// ownText decodes ids with the byte vocabulary as the tiny model defines it.
func ownText(ids []int32) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id < 256:
			b = append(b, byte(id))
		default:
			b = append(b, []string{"<bos>", "<eos>", "<pad>", "[DELETE]"}[id-256]...)
		}
	}
	return string(b)
}

// TestInspect runs the demo on the embedded broker and checks `creditflow
// inspect` against its own decoding of the samples topic: --best 3 and
// --worst 3 are the three highest and lowest rewards, --trajectory prints
// the sample's tokens, advantages, turns and text, its JSON equals GET
// /api/v1/samples/{id} of a monitor over the same topics, colors appear
// only on a terminal and without --no-color, and a tokenizer.json written
// here decodes to the same text as the built-in vocabulary.
func TestInspect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := brokertest.Start(t, broker.WithDefaultPartitions(4))
	o := demo.Defaults()
	o.Brokers, o.Groups = b.Addrs(), 8
	if _, err := demo.Run(ctx, o); err != nil {
		t.Fatalf("demo: %v", err)
	}
	topics := stage.DefaultTopics()
	own := ownSamples(t, readTopic(t, ctx, b.Addrs(), topics.Samples))
	brokers := strings.Join(b.Addrs(), ",")
	run := func(term bool, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := inspectCmd(&out, term, append([]string{"--brokers", brokers}, args...)); err != nil {
			t.Fatalf("inspect %v: %v", args, err)
		}
		return out.String()
	}
	views := func(out string) []monitor.SampleView {
		t.Helper()
		var vs []monitor.SampleView
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var v monitor.SampleView
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("not a JSON line: %v", err)
			}
			vs = append(vs, v)
		}
		return vs
	}
	rewards := make([]float64, 0, len(own))
	for _, s := range own {
		rewards = append(rewards, s.reward)
	}
	sort.Float64s(rewards)
	for _, c := range []struct {
		flag string
		want []float64
	}{{"--best", []float64{rewards[len(rewards)-1], rewards[len(rewards)-2], rewards[len(rewards)-3]}}, {"--worst", rewards[:3]}} {
		vs := views(run(false, c.flag, "3", "--json"))
		if len(vs) != 3 {
			t.Fatalf("%s 3: %d samples", c.flag, len(vs))
		}
		ids := map[string]bool{}
		for i, v := range vs {
			if v.Reward != c.want[i] || own[v.TrajectoryID] == nil || own[v.TrajectoryID].reward != v.Reward || ids[v.TrajectoryID] {
				t.Fatalf("%s 3: #%d is %s with reward %v, want reward %v (distinct ids)", c.flag, i, v.TrajectoryID, v.Reward, c.want[i])
			}
			ids[v.TrajectoryID] = true
		}
	}

	// One trajectory, against our own decoding and against the monitor's API.
	id := views(run(false, "--worst", "1", "--by", "process", "--json"))[0].TrajectoryID
	out := run(false, "--trajectory", id, "--json")
	v := views(out)[0]
	w := own[id]
	if len(v.Tokens) != len(w.tokens) || len(v.Turns) != len(w.deltas) {
		t.Fatalf("%s: %d tokens, %d turns; decoded %d, %d", id, len(v.Tokens), len(v.Turns), len(w.tokens), len(w.deltas))
	}
	for i := range w.tokens {
		if v.Tokens[i] != w.tokens[i] || v.LossMask[i] != int(w.mask[i]) || v.Advantages[i] != w.advantages[i] {
			t.Fatalf("%s token %d: %d/%d/%v, decoded %d/%d/%v", id, i, v.Tokens[i], v.LossMask[i], v.Advantages[i], w.tokens[i], w.mask[i], w.advantages[i])
		}
	}
	for k, tr := range v.Turns {
		if (tr.Delta == nil) != (w.deltas[k] == nil) || (tr.Delta != nil && *tr.Delta != *w.deltas[k]) || tr.Advantage != w.advs[k] {
			t.Fatalf("%s turn %d: Δ %v advantage %v, decoded %v %v", id, k, tr.Delta, tr.Advantage, w.deltas[k], w.advs[k])
		}
		// The turn's policy tokens carry its advantage.
		for i := tr.Action[0]; i < tr.Action[1]; i++ {
			if v.Advantages[i] != float32(tr.Advantage) || v.LossMask[i] != 1 {
				t.Fatalf("%s turn %d token %d: advantage %v, the turn's %v", id, k, i, v.Advantages[i], tr.Advantage)
			}
		}
		if tr.Eligible && (tr.With == nil || tr.Without == nil) {
			t.Fatalf("%s turn %d: no S with/without from the scored topic", id, k)
		}
	}
	if got := strings.Join(v.Text, ""); got != ownText(w.tokens) || !v.TurnsExact {
		t.Fatalf("%s: text %q (exact turns %v), decoded %q", id, got, v.TurnsExact, ownText(w.tokens))
	}
	m, err := monitor.New(monitor.Source{Brokers: b.Addrs(), Topics: []string{topics.Samples}, Scored: topics.Scored}, monitor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Once(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var api, cli map[string]any
	getJSON(t, srv.URL+"/api/v1/samples/"+id, &api)
	_ = json.Unmarshal([]byte(out), &cli)
	ab, _ := json.Marshal(api)
	cb, _ := json.Marshal(cli)
	if !bytes.Equal(ab, cb) {
		t.Fatalf("inspect --json and GET /api/v1/samples/%s differ:\n%s\n%s", id, cb, ab)
	}

	// The terminal view: colors on a terminal only, never with --no-color.
	plain := run(false, "--trajectory", id)
	colored := run(true, "--trajectory", id)
	noColor := run(true, "--trajectory", id, "--no-color")
	if strings.Contains(plain, "\x1b") || strings.Contains(noColor, "\x1b") {
		t.Fatal("escape sequences printed off a terminal or with --no-color")
	}
	if !strings.Contains(colored, "\x1b[48;2;") || !strings.Contains(colored, "\x1b[2m") {
		t.Fatal("no colored tokens on a terminal")
	}
	// Colored by Δ: the legend says so and the turn with the largest |Δ| is
	// painted in the scale's end (monitor/inspect's tests check the scale).
	byDelta := run(true, "--trajectory", id, "--color-by", "delta")
	if !strings.Contains(byDelta, "Δ of the turn, on its policy tokens") || byDelta == colored ||
		(!strings.Contains(byDelta, "\x1b[48;2;33;102;172m") && !strings.Contains(byDelta, "\x1b[48;2;178;24;43m")) {
		t.Fatalf("--color-by delta:\n%s", byDelta[:min(len(byDelta), 600)])
	}
	if run(false, "--trajectory", id, "--color-by", "delta") != plain {
		t.Fatal("--color-by changed the output without colors")
	}
	for _, want := range []string{"trajectory " + id, "turn 0 · ", "S with", "A_proc", ownText(w.tokens[v.Turns[0].Action[0]:v.Turns[0].Action[1]])} {
		if !strings.Contains(plain, want) {
			t.Fatalf("the view lacks %q:\n%s", want, plain)
		}
	}

	// The same trajectory from a replay with λ = 0, differences marked.
	replayTopic := topics.Samples + ".inspect-lambda-0"
	if err := runReplay([]string{"--brokers", brokers, "--topic-samples", replayTopic, "--lambda", "0", "--group", "inspect-test-replay", "--log-level", "error"}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	pair := views(run(false, "--trajectory", id, "--compare", replayTopic, "--json"))
	if len(pair) != 2 || pair[0].Topic != topics.Samples || pair[1].Topic != replayTopic || pair[1].TrajectoryID != id {
		t.Fatalf("--compare --json: %d views", len(pair))
	}
	differ := 0
	for i := range pair[0].Tokens {
		if pair[0].LossMask[i] == 1 && pair[0].Advantages[i] != pair[1].Advantages[i] {
			differ++
		}
	}
	cmp := run(false, "--trajectory", id, "--compare", replayTopic)
	if differ == 0 || !strings.Contains(cmp, fmt.Sprintf("differences: %d of ", differ)) || !strings.Contains(cmp, "⟦") || !strings.Contains(cmp, "(differs)") {
		t.Fatalf("--compare: %d tokens differ in the JSON; the view says:\n%s", differ, cmp[max(0, len(cmp)-300):])
	}
	if !strings.Contains(run(true, "--trajectory", id, "--compare", replayTopic), "\x1b[4m") {
		t.Fatal("--compare on a terminal underlines no token")
	}

	// A byte-level BPE tokenizer.json over the same 260 ids reads the same.
	vocab := map[string]int{}
	for _, p := range (func() []string {
		var out []string
		for by := 0; by < 256; by++ {
			out = append(out, gpt2Char(byte(by)))
		}
		return out
	})() {
		vocab[p] = len(vocab)
	}
	tj, _ := json.Marshal(map[string]any{"decoder": map[string]any{"type": "ByteLevel"}, "model": map[string]any{"type": "BPE", "vocab": vocab},
		"added_tokens": []map[string]any{{"id": 256, "content": "<bos>", "special": true}, {"id": 257, "content": "<eos>", "special": true},
			{"id": 258, "content": "<pad>", "special": true}, {"id": 259, "content": "[DELETE]", "special": true}}})
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, tj, 0o644); err != nil {
		t.Fatal(err)
	}
	bv := views(run(false, "--trajectory", id, "--json", "--tokenizer", path))[0]
	if bv.Tokenizer != "byte-level BPE" || strings.Join(bv.Text, "") != ownText(w.tokens) {
		t.Fatalf("--tokenizer %s: %s text %q", path, bv.Tokenizer, strings.Join(bv.Text, ""))
	}

	// Command lines that cannot work.
	for _, args := range [][]string{{}, {"--best", "2", "--worst", "2"}, {"--trajectory", id, "--best", "1"}, {"--best", "2", "--by", "luck"}, {"--best", "2", "--compare", "x"}, {"--best", "2", "--color-by", "luck"}} {
		var ue usageError
		if err := inspectCmd(&bytes.Buffer{}, false, append([]string{"--brokers", brokers}, args...)); !errors.As(err, &ue) {
			t.Errorf("inspect %v: %v, want a usage error", args, err)
		}
	}
	if err := inspectCmd(&bytes.Buffer{}, false, []string{"--brokers", brokers, "--trajectory", "no-such-id"}); !errors.Is(err, monitor.ErrNotFound) {
		t.Errorf("unknown trajectory: %v", err)
	}
}

// gpt2Char is GPT-2's printable stand-in for byte b (bytes_to_unicode).
func gpt2Char(b byte) string {
	if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || 0xAE <= b {
		return string(rune(b))
	}
	n := 0
	for c := 0; c < int(b); c++ {
		cb := byte(c)
		if !(('!' <= cb && cb <= '~') || (0xA1 <= cb && cb <= 0xAC) || 0xAE <= cb) {
			n++
		}
	}
	return string(rune(256 + n))
}
