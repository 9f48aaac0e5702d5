package hfcheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/protocol"
)

const (
	podToken      = "hfcheck-token"
	podAdminToken = "hfcheck-admin-token" // the admin endpoint (hot loads) has its own token
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPod runs `python -m cfpod` from scorer/gpupod in the project's environment
// on 127.0.0.1, on the CPU in dtype, with the fixture's context cap, and
// stops it when the test ends.
func startPod(t *testing.T, py, modelDir, dtype string) string {
	t.Helper()
	podDir, err := filepath.Abs("../gpupod")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	portFile, tokFile, adminFile := filepath.Join(tmp, "port"), filepath.Join(tmp, "token"), filepath.Join(tmp, "admin-token")
	if err := os.WriteFile(tokFile, []byte(podToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(adminFile, []byte(podAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-m", "cfpod", "--model", modelDir, "--addr", "127.0.0.1:0", "--port-file", portFile,
		"--token-file", tokFile, "--admin-token-file", adminFile, "--device", "cpu", "--dtype", dtype, "--threads", "2",
		"--max-context", strconv.Itoa(maxContext), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+podDir+string(os.PathListSeparator)+filepath.Join(podDir, "..", "..", "python"))
	exited, logs := startProcess(t, cmd, "pod")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := os.ReadFile(portFile)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return "http://127.0.0.1:" + strings.TrimSpace(string(b))
		}
		select {
		case <-exited:
			t.Fatalf("pod exited before listening:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod did not start within 3 minutes:\n%s", logs.String())
		}
	}
}

// podLoad hot-loads a folder into the pod (POST /v1/admin/load).
func podLoad(t *testing.T, url, dir string) {
	t.Helper()
	if status, eb := postLoad(t, url, dir); status != 200 {
		t.Fatalf("loading %s into the pod: status %d: %+v", dir, status, eb)
	}
}

// postLoad asks the pod to hot-load dir and returns the answer's status and,
// for an error, its body.
func postLoad(t *testing.T, url, dir string) (int, protocol.ErrorBody) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": dir})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/admin/load", bytes.NewReader(b))
	req.Header.Set(protocol.Header, protocol.Version)
	req.Header.Set("Authorization", "Bearer "+podAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb protocol.ErrorBody
	if resp.StatusCode != 200 {
		json.NewDecoder(resp.Body).Decode(&eb)
	}
	return resp.StatusCode, eb
}

func podClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New([]string{url}, client.WithBearerToken(podToken), client.WithRequestTimeout(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPodMatchesTransformers starts the pod (float32 on the CPU) and
// hot-loads every float32 folder into it in turn, comparing its row
// statistics and step graphs, over HTTP, with transformers' in float32;
// then hot-loads each refused config (refusals) and expects a 400 naming
// the field.
func TestPodMatchesTransformers(t *testing.T) {
	f := getFixture(t)
	url := startPod(t, f.python, f.models[0].Dir, "float32")
	for i, c := range checkpoints {
		t.Run(checkpointName(c.base, c.variant), func(t *testing.T) {
			m := f.model(t, checkpointName(c.base, c.variant))
			if i > 0 {
				podLoad(t, url, m.Dir)
			}
			compareHTTP(t, podClient(t, url), m, m.cases, m.ref["float32"], "float32 (pod)", tolScore, tolGraph)
		})
	}
	t.Run("refused", func(t *testing.T) { podRefuses(t, f, url) })
}

// compareHTTP scores the cases' sets and the model's attention jobs on a
// scorer over HTTP (the pod, creditflow scorer) through the protocol client
// and compares them with ref; tolerances of 0 only log.
func compareHTTP(t *testing.T, c *client.Client, m *checkpointFix, cases []rowCase, ref refResult, label string, tolS, tolG float64) (map[string]*diff, diff) {
	t.Helper()
	ctx := context.Background()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxContext != maxContext || info.Layers != m.layers || info.VocabSize != m.vocab {
		t.Fatalf("pod info %+v", info)
	}
	sets := make([]scorer.RowSet, len(cases))
	for i, rc := range cases {
		sets[i] = rc.set
	}
	res, _, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]float64, len(res))
	for i := range res {
		got[i] = res[i].Scores
	}
	ds := scoreDiffs(t, cases, got, ref.Scores)
	gs, err := scorertest.Graphs(c.Attention(ctx, m.jobs, scorer.AttentionOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var gd diff
	for j := range m.jobs {
		d := graphDiff(t, gs[j], ref, j)
		gd.abs, gd.rel, gd.n = max(gd.abs, d.abs), max(gd.rel, d.rel), gd.n+d.n
	}
	if tolS > 0 {
		checkScores(t, label, ds, tolS)
		checkGraphs(t, label, gd, tolG)
	}
	return ds, gd
}

// TestPodBFloat16 starts the pod in bfloat16 on the bfloat16 folders and
// compares its logprob rows and step graphs with transformers in bfloat16
// and with transformers in float32 on the same (bfloat16) weights, the exact
// answer for those weights. Running in bfloat16 rounds activations to 8
// significant bits, so neither matches the exact answer to float32
// precision; the pod must be within three times transformers' own distance from
// it (docs/model.md, "bfloat16").
func TestPodBFloat16(t *testing.T) {
	f := getFixture(t)
	url := startPod(t, f.python, f.models[0].DirBF16, "bfloat16")
	for i, c := range checkpoints {
		t.Run(checkpointName(c.base, c.variant), func(t *testing.T) {
			m := f.model(t, checkpointName(c.base, c.variant))
			if i > 0 {
				podLoad(t, url, m.DirBF16)
			}
			cases := logprobCases(m.cases)
			cl := podClient(t, url)
			dTF, gTF := compareHTTP(t, cl, m, cases, m.ref["bfloat16"], "", 0, 0)
			dExact, gExact := compareHTTP(t, cl, m, cases, m.ref["bf16-weights"], "", 0, 0)
			var tfExact diff
			for k, w := range m.ref["bf16-weights"].Scores {
				tfExact.add(m.ref["bfloat16"].Scores[k], w)
			}
			var tfExactG diff
			for j := range m.jobs {
				w, g := m.ref["bf16-weights"].Graphs[j], m.ref["bfloat16"].Graphs[j]
				for l := range w {
					for a := range w[l].AA {
						for b := range w[l].AA[a] {
							tfExactG.add(g[l].AA[a][b], w[l].AA[a][b])
							tfExactG.add(g[l].AO[a][b], w[l].AO[a][b])
						}
					}
				}
			}
			t.Logf("logprob: pod bf16 vs transformers bf16 %v; pod bf16 vs float32 %v; transformers bf16 vs float32 %v",
				dTF["logprob"], dExact["logprob"], tfExact)
			t.Logf("step graphs: pod bf16 vs transformers bf16 %v; pod bf16 vs float32 %v; transformers bf16 vs float32 %v",
				gTF, gExact, tfExactG)
			// Both are bfloat16 computations with their own rounding points; the
			// pod must be within three times transformers' own distance
			// (measured at most 1.7 times; bfloat16 kernels differ between CPUs).
			if dExact["logprob"].abs > 3*tfExact.abs {
				t.Errorf("logprob: the pod in bfloat16 is %.2e from the float32 answer, transformers in bfloat16 %.2e", dExact["logprob"].abs, tfExact.abs)
			}
			if gExact.abs > 3*tfExactG.abs {
				t.Errorf("step graphs: the pod in bfloat16 is %.2e from the float32 answer, transformers in bfloat16 %.2e", gExact.abs, tfExactG.abs)
			}
		})
	}
}
