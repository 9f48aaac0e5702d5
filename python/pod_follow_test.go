package python_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer/cpumodel"
)

func b64ids(ids []int32) string {
	b := make([]byte, 4*len(ids))
	for i, x := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

type podAnswer struct {
	status  int
	version int64
	score   float64
}

// TestPodFollowsPolicyAnnouncements: a scorer pod (CPU torch) started with
// --policy-brokers serves requests from several clients while a trainer announces a new
// checkpoint; the pod loads it with requests in flight, none fails, every answer names the
// version that computed it (all answers of one version agree, the two versions' differ),
// and answers after the load carry the new version.
func TestPodFollowsPolicyAnnouncements(t *testing.T) {
	py := projectPython(t) // the pod needs uvicorn: the project environment has it
	root := repoRoot(t)
	dir := t.TempDir()
	env := append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "scorer", "gpupod")+string(os.PathListSeparator)+
		filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1")
	runToEnd(t, env, py, "-c", `import sys
from tests.util import small_config, write_checkpoint
for name, seed in (("m1", 1), ("m2", 2)):
    write_checkpoint(sys.argv[1] + "/" + name, small_config(num_hidden_layers=4, hidden_size=96, head_dim=24,
                     intermediate_size=192), seed=seed, placeholder=96)`, dir)
	brokers := startBroker(t)
	portFile := filepath.Join(dir, "port")
	pod := startProc(t, env, py, "-m", "cfpod", "--model", filepath.Join(dir, "m1"), "--addr", "127.0.0.1:0",
		"--port-file", portFile, "--policy-brokers", brokers, "--policy-version", "1", "--device", "cpu",
		"--threads", "1", "--log-level", "info", "--insecure-no-token")
	var port string
	deadline := time.Now().Add(120 * time.Second)
	for port == "" && time.Now().Before(deadline) {
		if b, err := os.ReadFile(portFile); err == nil {
			port = strings.TrimSpace(string(b))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if port == "" {
		t.Fatalf("pod did not start\n%s", pod.out.String())
	}
	url := "http://127.0.0.1:" + port + "/v1/score"
	ctx := make([]int32, 400)
	for i := range ctx {
		ctx[i] = int32(i*31) % 96
	}
	body, _ := json.Marshal(map[string]any{"sets": []any{map[string]any{"id": "x", "rows": []any{
		map[string]any{"context": b64ids(ctx), "target": b64ids([]int32{5, 6, 7, 8}), "span": []int{1, 3}}}}}})

	var (
		mu      sync.Mutex
		answers []podAnswer
		stop    atomic.Bool
		seenNew atomic.Int64
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 120 * time.Second}
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for !stop.Load() {
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Creditflow-Scorer-Protocol", "creditflow.scorer/v1")
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					answers = append(answers, podAnswer{status: -1})
					mu.Unlock()
					continue
				}
				var r struct {
					Results []struct {
						Scores []*float64 `json:"scores"`
					} `json:"results"`
					PolicyVersion int64 `json:"policy_version"`
				}
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				a := podAnswer{status: resp.StatusCode, version: r.PolicyVersion, score: math.NaN()}
				if err == nil && len(r.Results) == 1 && len(r.Results[0].Scores) == 1 && r.Results[0].Scores[0] != nil {
					a.score = *r.Results[0].Scores[0]
				}
				if a.version < last {
					a.status = -2 // a client saw the version go back
				}
				last = a.version
				if a.version == 2 {
					seenNew.Add(1)
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}
	waitAnswers := func(n int) {
		for time.Now().Before(deadline) {
			mu.Lock()
			k := len(answers)
			mu.Unlock()
			if k >= n {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	deadline = time.Now().Add(120 * time.Second)
	waitAnswers(6)
	runPy(t, py, 60*time.Second, "-m", "creditflow", "announce", "--brokers", brokers, "--version", "2",
		"--checkpoint", filepath.Join(dir, "m2"))
	deadline = time.Now().Add(120 * time.Second)
	for seenNew.Load() < 9 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	byVersion := map[int64][]float64{}
	for i, a := range answers {
		if a.status != 200 {
			t.Fatalf("answer %d: status %d (-1: transport error, -2: version went back)\npod log:\n%s", i, a.status, pod.out.String())
		}
		if math.IsNaN(a.score) {
			t.Fatalf("answer %d has no score", i)
		}
		byVersion[a.version] = append(byVersion[a.version], a.score)
	}
	if len(byVersion[1]) == 0 || len(byVersion[2]) < 9 || len(byVersion) != 2 {
		t.Fatalf("answers by version: %d of v1, %d of v2, versions %v\npod log:\n%s", len(byVersion[1]), len(byVersion[2]), keys(byVersion), pod.out.String())
	}
	for v, s := range byVersion {
		for _, x := range s {
			if x != s[0] {
				t.Errorf("version %d answered %v and %v for the same request: the version does not name the model", v, s[0], x)
				break
			}
		}
	}
	if byVersion[1][0] == byVersion[2][0] {
		t.Errorf("versions 1 and 2 gave the same score %v: the checkpoint was not loaded", byVersion[1][0])
	}
	if !strings.Contains(pod.out.String(), `"loading announced policy"`) {
		t.Errorf("pod log lacks the announced load\n%s", pod.out.String())
	}
	t.Logf("%d answers: %d by version 1, %d by version 2, none failed", len(answers), len(byVersion[1]), len(byVersion[2]))
}

func keys(m map[int64][]float64) []string {
	var out []string
	for k := range m {
		out = append(out, strconv.FormatInt(k, 10))
	}
	return out
}

// runToEnd runs a command to completion in the repository root with env.
func runToEnd(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	p := startProc(t, env, name, args...)
	if err := p.wait(t, 120*time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, p.out.String())
	}
	return fmt.Sprint(p.out.String())
}

// TestPodVersionReachesSamples: `creditflow run` scores with a Python pod that follows
// announcements; samples scored before the announcement carry scorer_policy_version 1,
// samples of trajectories published after the pod loaded the announced checkpoint carry 2.
func TestPodVersionReachesSamples(t *testing.T) {
	py := projectPython(t) // the pod needs uvicorn: the project environment has it
	if !strings.Contains(runHelp(t), "max-policy-lag") {
		t.Skip("this build's stages do not record the scorer's policy version (policy versions are not merged)")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	for _, m := range []string{"m1", "m2"} {
		if err := cpumodel.WriteTiny(filepath.Join(dir, m)); err != nil {
			t.Fatal(err)
		}
	}
	// The follower imports the creditflow package: both folders, as `pip install ./python
	// "./scorer/gpupod[kafka]"` would give.
	env := append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "scorer", "gpupod")+string(os.PathListSeparator)+
		filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1")
	brokers := startBroker(t)
	portFile := filepath.Join(dir, "port")
	pod := startProc(t, env, py, "-m", "cfpod", "--model", filepath.Join(dir, "m1"), "--addr", "127.0.0.1:0",
		"--port-file", portFile, "--policy-brokers", brokers, "--policy-version", "1", "--device", "cpu",
		"--threads", "1", "--name", "creditflow-tiny", "--insecure-no-token")
	var port string
	deadline := time.Now().Add(120 * time.Second)
	for port == "" && time.Now().Before(deadline) {
		if b, err := os.ReadFile(portFile); err == nil && strings.HasSuffix(string(b), "\n") {
			port = strings.TrimSpace(string(b))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if port == "" {
		t.Fatalf("pod did not start\n%s", pod.out.String())
	}
	run := startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", "4",
		"--log-level", "warn", "--metrics-addr=", "--scorers", "http://127.0.0.1:"+port)

	versions := func(ids []string) map[string]int64 {
		t.Helper()
		waitArrived(t, brokers, ids, 120*time.Second)
		out := map[string]int64{}
		for _, s := range topicSamples(t, brokers, "creditflow.samples") {
			if s.ScorerPolicyVersion != nil {
				out[s.TrajectoryID] = *s.ScorerPolicyVersion
			} else {
				out[s.TrajectoryID] = -1
			}
		}
		return out
	}
	before := publish(t, py, brokers, "before", 0, 1, 4)
	got := versions(before)
	for _, id := range before {
		if got[id] != 1 {
			t.Fatalf("%s scored before the announcement: scorer_policy_version %d, want 1\nprocessor:\n%s", id, got[id], run.out.String())
		}
	}
	runPy(t, py, 60*time.Second, "-m", "creditflow", "announce", "--brokers", brokers, "--version", "2",
		"--checkpoint", filepath.Join(dir, "m2"))
	deadline = time.Now().Add(60 * time.Second)
	for {
		var h struct {
			PolicyVersion int64 `json:"policy_version"`
		}
		if resp, err := http.Get("http://127.0.0.1:" + port + "/healthz"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if h.PolicyVersion == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod never loaded the announced checkpoint\n%s", pod.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := publish(t, py, brokers, "after", 0, 1, 4)
	got = versions(after)
	for _, id := range after {
		if got[id] != 2 {
			t.Fatalf("%s scored after the pod loaded version 2: scorer_policy_version %d\npod:\n%s", id, got[id], pod.out.String())
		}
	}
}
