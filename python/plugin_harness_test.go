package python_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The trainer plug-ins' tests (TRL, verl) share their harness: a broker and `creditflow run`
// with the in-process tiny scorer, a framework script that writes one JSON line per row and
// a summary line, and the row-by-row comparison with `creditflow compute`.

// pluginMissing is the script's MissingSamples: the ids without samples and its message.
type pluginMissing struct {
	IDs     []string `json:"ids"`
	Message string   `json:"message"`
}

// pluginAnnounced is the announcement the script read back from the policy topic.
type pluginAnnounced struct {
	Version    int    `json:"version"`
	Checkpoint string `json:"checkpoint"`
}

// runPluginScript starts `creditflow broker` and `creditflow run`, runs script (a path under
// the repository) with the framework's interpreter py and returns the brokers and the
// script's output file.
func runPluginScript(t *testing.T, py, script string, groups int, env ...string) (brokers, out string) {
	t.Helper()
	brokers = startBroker(t)
	run := startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", "4",
		"--log-level", "warn", "--commit-interval", "200ms", "--metrics-addr=", "--scorers", "local")
	out = filepath.Join(t.TempDir(), "rows.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, "--brokers", brokers, "--groups", itoa(groups), "--out", out)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(pyEnv(t), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s\nprocessor:\n%s", filepath.Base(script), err, b, run.out.String())
	}
	return brokers, out
}

// readPluginOutput parses the script's rows and its summary line (`"summary": true`).
func readPluginOutput[R, S any](t *testing.T, path string) ([]R, S) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []R
	var sum S
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"summary": true`)) {
			if err := json.Unmarshal(sc.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var r R
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows, sum
}

// compareWithCompute checks one published row's advantages against compute's for its
// trajectory: equal (float32, 1e-6 relative) where mask is 1, 0 where it is 0. It returns the
// tool tokens it saw (mask 0 after the first policy token), whether the row had more than one
// advantage value, and whether it could be compared at all. where names the framework's
// side in messages.
func compareWithCompute(t *testing.T, ref map[string][]float64, id string, adv []float64, mask []int, where string) (tool int, perToken, ok bool) {
	t.Helper()
	want, found := ref[id]
	if !found {
		t.Errorf("compute has no result for %s", id)
		return 0, false, false
	}
	if len(want) != len(mask) {
		t.Errorf("%s: compute gives %d advantages for %d tokens", id, len(want), len(mask))
		return 0, false, false
	}
	first := slices.Index(mask, 1)
	distinct := map[float64]bool{}
	for i, m := range mask {
		if m == 0 {
			if i > first {
				tool++
			}
			if adv[i] != 0 {
				t.Errorf("%s token %d (mask 0): advantage %v, want 0", id, i, adv[i])
			}
			continue
		}
		wf := float64(float32(want[i]))
		if math.Abs(adv[i]-wf) > 1e-6*math.Max(1, math.Abs(wf)) {
			t.Errorf("%s token %d: advantage %v %s, compute %v", id, i, adv[i], where, want[i])
			break
		}
		distinct[adv[i]] = true
	}
	return tool, len(distinct) > 1, true
}

// checkZero: a row that was not published keeps advantage 0 everywhere.
func checkZero(t *testing.T, adv []float64) {
	t.Helper()
	for i, a := range adv {
		if a != 0 {
			t.Errorf("unpublished row: advantage %v at token %d, want 0", a, i)
			return
		}
	}
}
