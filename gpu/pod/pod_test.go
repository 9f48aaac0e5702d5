package pod_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/gpu"
	"github.com/creditflow/creditflow/gpu/client"
	"github.com/creditflow/creditflow/gpu/local"
	"github.com/creditflow/creditflow/gpu/model"
	"github.com/creditflow/creditflow/gpu/protocol"
	"github.com/creditflow/creditflow/internal/stepgraph"
)

const podToken = "pod-test-token"

var (
	pythonOnce sync.Once
	pythonPath string
)

// findPython returns an interpreter that can import torch, or skips the test.
func findPython(t *testing.T) string {
	t.Helper()
	pythonOnce.Do(func() {
		cands := []string{os.Getenv("CREDITFLOW_POD_PYTHON"), "python3", "/usr/bin/python3"}
		for _, c := range cands {
			if c == "" {
				continue
			}
			if err := exec.Command(c, "-c", "import torch").Run(); err == nil {
				pythonPath = c
				return
			}
		}
	})
	if pythonPath == "" {
		t.Skip("no python3 with torch (install python3-torch, or set CREDITFLOW_POD_PYTHON)")
	}
	return pythonPath
}

type pod struct {
	url    string
	cmd    *exec.Cmd
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPod runs `python -m cfpod` on 127.0.0.1 with a free port, float32 on CPU.
func startPod(t *testing.T, modelDir string, extra ...string) *pod {
	t.Helper()
	py := findPython(t)
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(podToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-m", "cfpod", "--model", modelDir, "--addr", "127.0.0.1:0", "--port-file", portFile,
		"--token-file", tokFile, "--device", "cpu", "--dtype", "float32", "--threads", "2"}, extra...)
	cmd := exec.Command(py, args...)
	cmd.Dir = "." // gpu/pod, where the cfpod package lives
	p := &pod{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the pod: %v", err)
	}
	exited := make(chan struct{}) // closed when the process has exited; then waitErr is set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGTERM drains and exits 0 (the pod's graceful shutdown).
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("pod after SIGTERM: %v, want a clean exit", waitErr)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("pod did not exit within 20 s of SIGTERM")
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pod log:\n%s", p.stderr.String())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, err := os.ReadFile(portFile)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			p.url = "http://127.0.0.1:" + strings.TrimSpace(string(b))
			break
		}
		select {
		case <-exited:
			t.Fatalf("pod exited before listening: %v\n%s", waitErr, p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod did not start within 90 s:\n%s", p.stderr.String())
		}
	}
	resp, err := http.Get(p.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pod /healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	return p
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New([]string{url}, append([]client.Option{client.WithBearerToken(podToken),
		client.WithRequestTimeout(60 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// searchSets builds LAPO backward row sets shaped like search QA (prompt,
// turns of action + observation, one row with every turn and one per turn
// replaced by the placeholder), scaled down for a CPU.
func searchSets(r *rand.Rand, n, vocab int, placeholder int32) []gpu.RowSet {
	tok := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(r.Intn(vocab))
		}
		return out
	}
	var sets []gpu.RowSet
	for s := 0; s < n; s++ {
		prompt := tok(40 + r.Intn(20))
		turns := make([][]int32, 1+r.Intn(3))
		for i := range turns {
			turns[i] = append(tok(8+r.Intn(8)), tok(30+r.Intn(30))...)
		}
		target := tok(20 + r.Intn(10))
		a := 3 + r.Intn(5)
		span := [2]int{a, a + 3 + r.Intn(6)}
		full := append([]int32(nil), prompt...)
		for _, tt := range turns {
			full = append(full, tt...)
		}
		rows := []gpu.Row{{Context: full, Target: target, Span: span}}
		for k := range turns {
			ctx := append([]int32(nil), prompt...)
			for i, tt := range turns {
				if i == k {
					ctx = append(ctx, placeholder)
				} else {
					ctx = append(ctx, tt...)
				}
			}
			rows = append(rows, gpu.Row{Context: ctx, Target: target, Span: span})
		}
		sets = append(sets, gpu.RowSet{ID: fmt.Sprintf("traj-%d", s), Rows: rows})
	}
	return sets
}

// graphJobs builds AttnSR jobs with more than one 128-token query block.
func graphJobs(r *rand.Rand, n, vocab, layers int) []gpu.AttentionJob {
	var jobs []gpu.AttentionJob
	for j := 0; j < n; j++ {
		pos := 30 + r.Intn(20)
		K := 3 + r.Intn(4)
		var steps []gpu.Step
		for k := 0; k < K; k++ {
			a := 20 + r.Intn(40)
			st := gpu.Step{Action: [2]int{pos, pos + a}}
			pos += a
			if k%3 != 1 {
				o := 10 + r.Intn(40)
				st.Observation = [2]int{pos, pos + o}
				pos += o
			}
			steps = append(steps, st)
		}
		toks := make([]int32, pos)
		for i := range toks {
			toks[i] = int32(r.Intn(vocab))
		}
		ls := []int{0, layers - 1, layers - 1}
		jobs = append(jobs, gpu.AttentionJob{ID: fmt.Sprintf("job-%d", j), Tokens: toks, Steps: steps, Layers: ls})
	}
	return jobs
}

// checkScores scores sets on the pod and on the reference and compares (1e-4).
func checkScores(t *testing.T, ctx context.Context, pod, ref gpu.Scorer, sets []gpu.RowSet, what string) {
	t.Helper()
	got, err := pod.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatalf("%s: pod ScoreRows: %v", what, err)
	}
	exp, err := ref.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	compareScores(t, what, got, exp, 1e-4)
}

// checkGraphs captures step graphs on the pod and on the reference and compares (1e-5).
func checkGraphs(t *testing.T, ctx context.Context, pod, ref gpu.Scorer, jobs []gpu.AttentionJob, what string) {
	t.Helper()
	got, err := pod.Attention(ctx, jobs)
	if err != nil {
		t.Fatalf("%s: pod Attention: %v", what, err)
	}
	exp, err := ref.Attention(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	compareGraphs(t, what, got, exp, 1e-5)
	// The pod's lower-graphs answer (with binary attention requests) is its K×K answer cut
	// by the rule the client and the scored record use, bit for bit.
	la, ok := pod.(gpu.LowerAttentioner)
	if !ok {
		return
	}
	lower, _, err := la.AttentionLower(ctx, jobs)
	if err != nil {
		t.Fatalf("%s: pod AttentionLower: %v", what, err)
	}
	for i, gs := range got {
		for l, g := range gs {
			want := stepgraph.Cut(g.Layer, g.AA, g.AO)
			if !reflect.DeepEqual(bitsOfLower(lower[i][l]), bitsOfLower(want)) {
				t.Fatalf("%s: job %d layer %d: lower answer %+v, the cut of the K×K answer %+v", what, i, g.Layer, lower[i][l], want)
			}
		}
	}
}

// bitsOfLower is a lower graph with its values as bits (so -0 and NaN compare exactly).
func bitsOfLower(g gpu.LowerGraph) [5][]uint64 {
	bits := func(v []float64) []uint64 {
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = math.Float64bits(x)
		}
		return out
	}
	summed := uint64(0)
	if g.Summed() {
		summed = 1
	}
	return [5][]uint64{{uint64(g.Layer), uint64(g.K), summed}, bits(g.AA), bits(g.AO), bits(g.Sum)}
}

func compareScores(t *testing.T, what string, got, want []gpu.RowScores, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d sets, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		if len(got[i].Scores) != len(want[i].Scores) {
			t.Fatalf("%s: set %d has %d scores, want %d", what, i, len(got[i].Scores), len(want[i].Scores))
		}
		if got[i].Truncations != want[i].Truncations {
			t.Errorf("%s: set %d truncations %d, want %d", what, i, got[i].Truncations, want[i].Truncations)
		}
		for j, w := range want[i].Scores {
			d := math.Abs(got[i].Scores[j] - w)
			if !(d <= tol) {
				t.Errorf("%s: set %d row %d: pod S = %.9f, reference %.9f (|diff| %.2e > %.0e)", what, i, j, got[i].Scores[j], w, d, tol)
			}
			worst = math.Max(worst, d)
		}
	}
	t.Logf("%s: max |S_pod − S_ref| = %.3e over %d sets", what, worst, len(want))
}

func compareGraphs(t *testing.T, what string, got, want [][]gpu.StepGraph, tol float64) {
	t.Helper()
	worst := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s: job %d has %d graphs, want %d", what, i, len(got[i]), len(want[i]))
		}
		for l := range want[i] {
			g, w := got[i][l], want[i][l]
			if g.Layer != w.Layer {
				t.Fatalf("%s: job %d graph %d is layer %d, want %d", what, i, l, g.Layer, w.Layer)
			}
			for _, m := range []struct{ g, w [][]float64 }{{g.AA, w.AA}, {g.AO, w.AO}} {
				for j := range m.w {
					for k := range m.w[j] {
						d := math.Abs(m.g[j][k] - m.w[j][k])
						if !(d <= tol) {
							t.Errorf("%s: job %d layer %d [%d][%d]: pod %.9f, reference %.9f", what, i, w.Layer, j, k, m.g[j][k], m.w[j][k])
						}
						worst = math.Max(worst, d)
					}
				}
			}
		}
	}
	t.Logf("%s: max |G_pod − G_ref| = %.3e over %d jobs", what, worst, len(want))
}

func postJSON(t *testing.T, url, token string, body any, out any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set(protocol.Header, protocol.Version)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("POST %s: answer %d is not JSON: %v: %s", url, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

// TestPodMatchesReference starts one pod on the tiny model and checks it
// against the Go reference scorer, then hot-loads Qwen2 and Qwen3 checkpoints
// into the same pod (one start: importing torch is slow on small machines).
func TestPodMatchesReference(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "tiny")
	if err := model.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	// Tree packing here; the walk (the default) equals row-by-row scoring bitwise
	// in the Python tests.
	p := startPod(t, dir, "--name", "creditflow-tiny", "--policy-version", "3", "--packing", "tree")
	t.Run("tiny", func(t *testing.T) { testTiny(t, p) })
	t.Run("statistics", func(t *testing.T) { testStatistics(t, p) })
	t.Run("hot-load", func(t *testing.T) { testHotLoad(t, p, root) })
}

// testTiny compares scores, usage, step graphs and errors with the reference.
func testTiny(t *testing.T, p *pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ref := local.New(model.Tiny(), local.WithPolicyVersion(3))
	c := newClient(t, p.url)

	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ref.Info(ctx)
	for _, f := range []string{protocol.FeatureRowPieces, protocol.FeatureBinaryJobs, protocol.FeatureLowerGraphs} {
		if !slices.Contains(info.Features, f) {
			t.Errorf("pod info features %v lack %s", info.Features, f)
		}
	}
	info.Features, want.Features = nil, nil
	if fmt.Sprint(info) != fmt.Sprint(want) {
		t.Errorf("pod info %+v, reference %+v", info, want)
	}

	r := rand.New(rand.NewSource(7))
	sets := searchSets(r, 6, 256, model.TinyDelete)
	checkScores(t, ctx, c, ref, sets, "tiny")

	// Rows at the rollout temperature: one set per temperature, and one set
	// mixing temperatures over rows that share their prefixes.
	hot := searchSets(r, 4, 256, model.TinyDelete)
	for i := range hot {
		for j := range hot[i].Rows {
			hot[i].Rows[j].Temperature = []float64{0.7, 1.3, 0, 0.4}[(i+j)%4]
		}
	}
	checkScores(t, ctx, c, ref, hot, "tiny with temperatures")

	// Compact rows (pieces of one copy of each set's tokens) score
	// bit-identically to the same rows with full contexts.
	fullGot, err := c.ScoreRows(ctx, hot)
	if err != nil {
		t.Fatal(err)
	}
	compact := make([]gpu.RowSet, len(hot))
	for i, s := range hot {
		compact[i] = compactOf(s)
	}
	compactGot, err := c.ScoreRows(ctx, compact)
	if err != nil {
		t.Fatal(err)
	}
	compareScores(t, "compact vs full rows on the pod", compactGot, fullGot, 0)

	// Usage: the pod shares prefixes, so it forwards fewer tokens than row by row.
	var resp protocol.ScoreResponse
	wire := protocol.ScoreRequest{}
	for _, s := range sets {
		ws := protocol.WireRowSet{ID: s.ID}
		for _, row := range s.Rows {
			ws.Rows = append(ws.Rows, protocol.WireRow{Context: row.Context, Target: row.Target, Span: &row.Span})
		}
		wire.Sets = append(wire.Sets, ws)
	}
	if st := postJSON(t, p.url+protocol.PathScore, podToken, wire, &resp); st != 200 {
		t.Fatalf("raw score request: status %d", st)
	}
	var rowByRow int64
	for _, s := range sets {
		for _, row := range s.Rows {
			rowByRow += int64(len(row.Context) + len(row.Target))
		}
	}
	if resp.Usage.TokensRowByRow != rowByRow || resp.Usage.TokensForwarded <= 0 || resp.Usage.TokensForwarded >= rowByRow {
		t.Errorf("usage %+v: want tokens_row_by_row %d and 0 < tokens_forwarded < it", resp.Usage, rowByRow)
	}
	t.Logf("tokens forwarded %d of %d row by row (%.2fx fewer)", resp.Usage.TokensForwarded, rowByRow,
		float64(rowByRow)/float64(resp.Usage.TokensForwarded))

	jobs := graphJobs(r, 3, 256, 2)
	checkGraphs(t, ctx, c, ref, jobs, "tiny")

	// Invalid input is rejected (400, not retried); a wrong token is a status error.
	bad := []gpu.RowSet{{ID: "bad", Rows: []gpu.Row{{Context: []int32{1, 2}, Target: []int32{3, 999}, Span: [2]int{0, 2}}}}}
	_, err = c.ScoreRows(ctx, bad)
	var rej *gpu.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Message, "outside the vocabulary") {
		t.Errorf("token out of range: got %v, want a RejectedError about the vocabulary", err)
	}
	wrong := newClient(t, p.url, client.WithBearerToken("wrong"))
	_, err = wrong.ScoreRows(ctx, sets[:1])
	var se *gpu.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: got %v, want a 401 StatusError", err)
	}
}

// ---- Qwen2 / Qwen3 checkpoints written here (the model package exports only WriteTiny) ----

type tensor struct {
	name  string
	shape []int
	data  []float32
}

func writeSafetensors(path, dtype string, ts []tensor) error {
	esz := map[string]int{"F32": 4, "BF16": 2}[dtype]
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	off := 0
	for _, t := range ts {
		n := len(t.data) * esz
		hdr[t.name] = map[string]any{"dtype": dtype, "shape": t.shape, "data_offsets": []int{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))
	buf = append(buf, hj...)
	for _, t := range ts {
		for _, v := range t.data {
			if dtype == "F32" {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			} else {
				b := math.Float32bits(v)
				b += 0x7fff + (b>>16)&1 // round to nearest even
				buf = binary.LittleEndian.AppendUint16(buf, uint16(b>>16))
			}
		}
	}
	return os.WriteFile(path, buf, 0o644)
}

// writeQwen writes a small random Qwen2 (q/k/v biases, tied, F32) or Qwen3
// (q/k norms, untied, BF16) checkpoint.
func writeQwen(t *testing.T, dir, arch string, seed int64) {
	t.Helper()
	const (
		hidden, layers, heads, kv, hd, inter, vocab = 64, 2, 4, 2, 16, 96, 300
	)
	tied := arch == "Qwen2ForCausalLM"
	cfg := map[string]any{
		"architectures": []string{arch}, "hidden_size": hidden, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter,
		"vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
		"tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float32",
	}
	r := rand.New(rand.NewSource(seed))
	var ts []tensor
	mat := func(name string, out, in int, a float64) {
		d := make([]float32, out*in)
		for i := range d {
			d[i] = float32((2*r.Float64() - 1) * a)
		}
		ts = append(ts, tensor{name, []int{out, in}, d})
	}
	vec := func(name string, n int, center, a float64) {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(center + (2*r.Float64()-1)*a)
		}
		ts = append(ts, tensor{name, []int{n}, d})
	}
	unit := func(in int) float64 { return math.Sqrt(3 / float64(in)) }
	mat("model.embed_tokens.weight", vocab, hidden, 1)
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		vec(p+"input_layernorm.weight", hidden, 1, 0.2)
		mat(p+"self_attn.q_proj.weight", heads*hd, hidden, 2*unit(hidden))
		mat(p+"self_attn.k_proj.weight", kv*hd, hidden, 2*unit(hidden))
		mat(p+"self_attn.v_proj.weight", kv*hd, hidden, unit(hidden))
		mat(p+"self_attn.o_proj.weight", hidden, heads*hd, unit(heads*hd))
		if arch == "Qwen2ForCausalLM" {
			vec(p+"self_attn.q_proj.bias", heads*hd, 0, 0.3)
			vec(p+"self_attn.k_proj.bias", kv*hd, 0, 0.3)
			vec(p+"self_attn.v_proj.bias", kv*hd, 0, 0.3)
		} else {
			vec(p+"self_attn.q_norm.weight", hd, 1, 0.3)
			vec(p+"self_attn.k_norm.weight", hd, 1, 0.3)
		}
		vec(p+"post_attention_layernorm.weight", hidden, 1, 0.2)
		mat(p+"mlp.gate_proj.weight", inter, hidden, unit(hidden))
		mat(p+"mlp.up_proj.weight", inter, hidden, unit(hidden))
		mat(p+"mlp.down_proj.weight", hidden, inter, unit(inter))
	}
	vec("model.norm.weight", hidden, 1, 0.2)
	if !tied {
		mat("lm_head.weight", vocab, hidden, 1.5*unit(hidden))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	dtype := "F32"
	if !tied {
		dtype = "BF16"
	}
	// Two shards, as large checkpoints come.
	half := len(ts) / 2
	if err := writeSafetensors(filepath.Join(dir, "model-00001-of-00002.safetensors"), dtype, ts[:half]); err != nil {
		t.Fatal(err)
	}
	if err := writeSafetensors(filepath.Join(dir, "model-00002-of-00002.safetensors"), dtype, ts[half:]); err != nil {
		t.Fatal(err)
	}
}

// testHotLoad hot-loads a Qwen2 and then a Qwen3 checkpoint through POST
// /v1/admin/load and checks the policy version the pod reports and its
// numbers against the Go reference on the same checkpoints.
func testHotLoad(t *testing.T, p *pod, root string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i, arch := range []string{"Qwen2ForCausalLM", "Qwen3ForCausalLM"} {
		t.Run(arch, func(t *testing.T) {
			dir := filepath.Join(root, arch)
			writeQwen(t, dir, arch, int64(11+i))
			version := int64(10 + i)
			var info gpu.ModelInfo
			if st := postJSON(t, p.url+"/v1/admin/load", podToken, map[string]any{"model": dir, "policy_version": version}, &info); st != 200 {
				t.Fatalf("admin load: status %d, %+v", st, info)
			}
			if info.PolicyVersion != version || info.Architecture != arch || info.VocabSize != 300 || info.Name != "creditflow-tiny" {
				t.Errorf("after load: info %+v, want policy version %d, %s, vocab 300, name kept", info, version, arch)
			}
			m, err := model.LoadWith(dir, model.WithPlaceholderIDs([]int32{299}))
			if err != nil {
				t.Fatal(err)
			}
			ref := local.New(m)
			c := newClient(t, p.url)
			r := rand.New(rand.NewSource(int64(100 + i)))
			sets := searchSets(r, 4, 299, 299)
			checkScores(t, ctx, c, ref, sets, arch)
			checkGraphs(t, ctx, c, ref, graphJobs(r, 2, 300, 2), arch)
		})
	}
	// A failed load keeps the previous model and says why.
	var eb protocol.ErrorBody
	if st := postJSON(t, p.url+"/v1/admin/load", podToken, map[string]any{"model": filepath.Join(root, "missing")}, &eb); st != 400 || eb.Code != gpu.CodeBadRequest {
		t.Errorf("loading a missing folder: status %d %+v, want 400 bad_request", st, eb)
	}
	var info gpu.ModelInfo
	req, _ := http.NewRequest(http.MethodGet, p.url+protocol.PathInfo, nil)
	req.Header.Set("Authorization", "Bearer "+podToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.Architecture != "Qwen3ForCausalLM" || info.PolicyVersion != 11 {
		t.Errorf("after a failed load the pod serves %+v, want the Qwen3 model at policy version 11", info)
	}
	// The metrics name the policy version and the loads.
	mresp, err := http.Get(p.url + protocol.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{"creditflow_scorer_pod_policy_version 11", `creditflow_scorer_pod_model_loads_total{result="ok"} 3`,
		`creditflow_scorer_pod_model_loads_total{result="error"} 1`, `creditflow_scorer_server_requests_total{op="score",status="200"}`,
		"creditflow_scorer_pod_tokens_forwarded_total "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// compactOf rewrites a set in the compact form: the first row's context is
// the set's tokens, every row the prefix and suffix it shares with them as
// spans around literal ids.
func compactOf(s gpu.RowSet) gpu.RowSet {
	base := s.Rows[0].Context
	out := gpu.RowSet{ID: s.ID, Tokens: base, Pieces: make([][]gpu.Piece, len(s.Rows))}
	for j, r := range s.Rows {
		c := r.Context
		p := 0
		for p < len(c) && p < len(base) && c[p] == base[p] {
			p++
		}
		q := 0
		for q < len(c)-p && q < len(base)-p && c[len(c)-1-q] == base[len(base)-1-q] {
			q++
		}
		ps := []gpu.Piece{{Start: 0, End: p}}
		if mid := c[p : len(c)-q]; len(mid) > 0 {
			ps = append(ps, gpu.Piece{Literal: append(gpu.Tokens{}, mid...)})
		}
		if q > 0 {
			ps = append(ps, gpu.Piece{Start: len(base) - q, End: len(base)})
		}
		out.Pieces[j] = ps
		r.Context = nil
		out.Rows = append(out.Rows, r)
	}
	return out
}
