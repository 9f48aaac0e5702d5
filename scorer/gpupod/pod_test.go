package pod_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/syncbuf"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

const (
	podToken   = "pod-test-token"
	adminToken = "pod-test-admin-token" // /v1/admin/load takes this one only
)

// findPython is the project's Python environment (internal/pyenv: PyTorch 2,
// uvicorn); CREDITFLOW_POD_PYTHON names another interpreter that has them.
func findPython(t *testing.T) string {
	t.Helper()
	if py := os.Getenv("CREDITFLOW_POD_PYTHON"); py != "" {
		return py
	}
	return pyenvtest.Python(t)
}

type pod struct {
	url    string
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// syncBuffer is a child process's output, read while it runs.
type syncBuffer = syncbuf.Buffer

// startPod runs `python -m cfpod` on 127.0.0.1 with a free port, float32 on CPU.
func startPod(t *testing.T, modelDir string, extra ...string) *pod {
	t.Helper()
	py := findPython(t)
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	tokFile, adminFile := filepath.Join(dir, "token"), filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokFile, []byte(podToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(adminFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-m", "cfpod", "--model", modelDir, "--addr", "127.0.0.1:0", "--port-file", portFile,
		"--token-file", tokFile, "--admin-token-file", adminFile, "--device", "cpu", "--dtype", "float32",
		"--threads", "2"}, extra...)
	cmd := exec.Command(py, args...)
	cmd.Dir = "." // scorer/gpupod, where the cfpod package lives
	// The pod runs creditflow's Llama (python/creditflow/llama.py): the package from the checkout.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "..", "python"))
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
	for _, path := range []string{protocol.PathHealth, protocol.PathLive} {
		resp, err := http.Get(p.url + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("pod %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
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
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	// Tree packing here; the walk (the default) equals row-by-row scoring bitwise
	// in the Python tests.
	p := startPod(t, dir, "--name", "creditflow-tiny", "--policy-version", "3", "--packing", "tree")
	t.Run("tiny", func(t *testing.T) { testTiny(t, p) })
	t.Run("statistics", func(t *testing.T) { testStatistics(t, p) })
	t.Run("usage", func(t *testing.T) { testUsage(t, p) })
	t.Run("hot-load", func(t *testing.T) { testHotLoad(t, p, root) })
}

// TestPodOnSdpaMatchesReference: the pod on torch's scaled_dot_product_attention
// (--attention sdpa, the accelerator's kernels, here on CPU) with the walk (every edge on
// a cached prefix: the lower-right causal bias with grouped heads) against the Go
// reference, as TestPodMatchesReference does with the reference attention and tree packs.
func TestPodOnSdpaMatchesReference(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := cpumodel.WriteTiny(dir); err != nil {
		t.Fatal(err)
	}
	p := startPod(t, dir, "--name", "creditflow-tiny", "--policy-version", "3", "--packing", "walk",
		"--attention", "sdpa", "--log-level", "info")
	t.Run("tiny", func(t *testing.T) { testTiny(t, p) })
	t.Run("statistics", func(t *testing.T) { testStatistics(t, p) })
	if !strings.Contains(p.stderr.String(), `"attention": "sdpa"`) { // the line after the port file
		t.Fatalf("the pod did not say it attends with sdpa:\n%s", p.stderr.String())
	}
}

// testTiny compares scores, usage, step graphs and errors with the reference.
func testTiny(t *testing.T, p *pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ref := local.New(cpumodel.Tiny(), local.WithPolicyVersion(3))
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
	sets := searchSets(r, 6, 256, cpumodel.TinyDelete)
	checkScores(t, ctx, c, ref, sets, "tiny")

	// Rows at the rollout temperature: one set per temperature, and one set
	// mixing temperatures over rows that share their prefixes.
	hot := searchSets(r, 4, 256, cpumodel.TinyDelete)
	for i := range hot {
		for j := range hot[i].Rows {
			hot[i].Rows[j].Temperature = []float64{0.7, 1.3, 0, 0.4}[(i+j)%4]
		}
	}
	checkScores(t, ctx, c, ref, hot, "tiny with temperatures")

	// Compact rows (pieces of one copy of each set's tokens) score
	// bit-identically to the same rows with full contexts.
	fullGot, _, err := c.ScoreRows(ctx, hot)
	if err != nil {
		t.Fatal(err)
	}
	compact := make([]scorer.RowSet, len(hot))
	for i, s := range hot {
		compact[i] = scorertest.CompactOf(s)
	}
	compactGot, _, err := c.ScoreRows(ctx, compact)
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
	bad := []scorer.RowSet{{ID: "bad", Rows: []scorer.Row{{Context: []int32{1, 2}, Target: []int32{3, 999}, Span: [2]int{0, 2}}}}}
	_, _, err = c.ScoreRows(ctx, bad)
	var rej *scorer.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Message, "outside the vocabulary") {
		t.Errorf("token out of range: got %v, want a RejectedError about the vocabulary", err)
	}
	wrong := newClient(t, p.url, client.WithBearerToken("wrong"))
	_, _, err = wrong.ScoreRows(ctx, sets[:1])
	var se *scorer.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: got %v, want a 401 StatusError", err)
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
			var info scorer.ModelInfo
			var eb protocol.ErrorBody
			if st := postJSON(t, p.url+"/v1/admin/load", podToken, map[string]any{"model": dir}, &eb); st != 401 || eb.Code != scorer.CodeUnauthorized {
				t.Errorf("admin load with the scoring token: status %d %+v, want 401 unauthorized", st, eb)
			}
			if st := postJSON(t, p.url+"/v1/admin/load", adminToken, map[string]any{"model": dir, "policy_version": version}, &info); st != 200 {
				t.Fatalf("admin load: status %d, %+v", st, info)
			}
			if info.PolicyVersion != version || info.Architecture != arch || info.VocabSize != 300 || info.Name != "creditflow-tiny" {
				t.Errorf("after load: info %+v, want policy version %d, %s, vocab 300, name kept", info, version, arch)
			}
			m, err := cpumodel.LoadWith(dir, cpumodel.WithPlaceholderIDs([]int32{299}))
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
	if st := postJSON(t, p.url+"/v1/admin/load", adminToken, map[string]any{"model": filepath.Join(root, "missing")}, &eb); st != 400 || eb.Code != scorer.CodeBadRequest {
		t.Errorf("loading a missing folder: status %d %+v, want 400 bad_request", st, eb)
	}
	var info scorer.ModelInfo
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
