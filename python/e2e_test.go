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
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// trainerLine is one line of examples/python/trainer.py --out.
type trainerLine struct {
	TrajectoryID        string    `json:"trajectory_id"`
	PolicyVersion       int64     `json:"policy_version"`
	ScorerPolicyVersion *int64    `json:"scorer_policy_version"`
	Source              *string   `json:"source"`
	Output              string    `json:"output"`
	PerToken            []float64 `json:"per_token"`
	LossMask            []int     `json:"loss_mask"`
}

func readTrainerOut(t *testing.T, path string) []trainerLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []trainerLine
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var x trainerLine
		if err := json.Unmarshal(l, &x); err != nil {
			t.Fatalf("trainer line %q: %v", l, err)
		}
		out = append(out, x)
	}
	return out
}

// publish runs one rollout worker and returns the trajectory ids it published.
func publish(t *testing.T, py, brokers, worker string, firstGroup, groups, groupSize int, extra ...string) []string {
	t.Helper()
	args := append([]string{"examples/python/rollout_worker.py", "--brokers", brokers, "--worker", worker,
		"--first-group", itoa(firstGroup), "--groups", itoa(groups), "--group-size", itoa(groupSize)}, extra...)
	out := runPy(t, py, 120*time.Second, args...)
	var res struct {
		Published     int      `json:"published"`
		TrajectoryIDs []string `json:"trajectory_ids"`
	}
	if err := json.Unmarshal(lastLine(out), &res); err != nil {
		t.Fatalf("worker output %q: %v", out, err)
	}
	if res.Published != groups*groupSize {
		t.Fatalf("worker %s published %d, want %d", worker, res.Published, groups*groupSize)
	}
	return res.TrajectoryIDs
}

func itoa(i int) string { return strconv.Itoa(i) }

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// publishBoth runs two rollout-worker processes at once. w1 sets a source (its records
// use the current Trajectory schema), w2 does not (the package then writes the schema of
// release aeddc48): the stages take both.
func publishBoth(t *testing.T, py, brokers string, firstGroup, groups, groupSize int) []string {
	t.Helper()
	var wg sync.WaitGroup
	ids := make([][]string, 2)
	for i, w := range []string{"w1", "w2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var extra []string
			if w == "w1" {
				extra = []string{"--source", "nq"}
			}
			ids[i] = publish(t, py, brokers, w, firstGroup, groups, groupSize, extra...)
		}()
	}
	wg.Wait()
	return append(ids[0], ids[1]...)
}

// computeAdvantages runs `creditflow replay --jsonl | creditflow compute --tokens` on the
// scored topic and returns token advantages by trajectory.
func computeAdvantages(t *testing.T, brokers string) map[string][]float64 {
	t.Helper()
	bin := creditflowBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	replay := exec.CommandContext(ctx, bin, "replay", "--brokers", brokers, "--jsonl")
	replay.Stderr = &stderr
	scored, err := replay.Output()
	if err != nil {
		t.Fatalf("replay --jsonl: %v\n%s", err, stderr.String())
	}
	compute := exec.CommandContext(ctx, bin, "compute", "--tokens")
	compute.Stdin = bytes.NewReader(scored)
	compute.Stderr = &stderr
	out, err := compute.Output()
	if err != nil {
		t.Fatalf("compute: %v\n%s", err, stderr.String())
	}
	res := map[string][]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var o struct {
			TrajectoryID    string    `json:"trajectory_id"`
			TokenAdvantages []float64 `json:"token_advantages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		res[o.TrajectoryID] = o.TokenAdvantages
	}
	return res
}

// checkExactlyOnce: the trainer saw every published trajectory once, nothing else, and its
// advantages equal `creditflow compute` on the scored records (float32 on the wire).
func checkExactlyOnce(t *testing.T, brokers string, published []string, got []trainerLine) {
	t.Helper()
	seen := map[string]trainerLine{}
	for _, l := range got {
		if _, dup := seen[l.TrajectoryID]; dup {
			t.Errorf("trajectory %s reached the trainer twice after dedupe", l.TrajectoryID)
		}
		seen[l.TrajectoryID] = l
		wantSource := strings.HasPrefix(l.TrajectoryID, "w1-")
		if (l.Source != nil && *l.Source == "nq") != wantSource || (!wantSource && l.Source != nil) {
			t.Errorf("%s: source %v, want nq only on w1's samples", l.TrajectoryID, l.Source)
		}
		if l.ScorerPolicyVersion == nil {
			t.Errorf("%s: no scorer_policy_version", l.TrajectoryID)
		}
	}
	want := map[string]bool{}
	for _, id := range published {
		want[id] = true
		if _, ok := seen[id]; !ok {
			t.Errorf("trajectory %s never reached the trainer", id)
		}
	}
	for id := range seen {
		if !want[id] {
			t.Errorf("trainer got %s, which nobody published", id)
		}
	}
	ref := computeAdvantages(t, brokers)
	compared := 0
	for id, l := range seen {
		adv, ok := ref[id]
		if !ok {
			t.Errorf("compute has no result for %s", id)
			continue
		}
		if len(adv) != len(l.PerToken) {
			t.Errorf("%s: %d advantages from compute, %d in the sample", id, len(adv), len(l.PerToken))
			continue
		}
		for i := range adv {
			if math.Abs(adv[i]-l.PerToken[i]) > 1e-6*math.Max(1, math.Abs(adv[i])) {
				t.Errorf("%s token %d: sample advantage %v, compute %v", id, i, l.PerToken[i], adv[i])
				break
			}
		}
		compared++
	}
	if compared != len(published) {
		t.Errorf("compared %d trajectories with compute, want %d", compared, len(published))
	}
}

// TestRolloutWorkersToTrainer: two rollout-worker processes publish groups with
// RolloutPublisher, `creditflow run` scores them and computes advantages, a trainer process
// reads them with SampleStream. Every trajectory arrives exactly once after dedupe, with the
// advantages `creditflow compute` gives on the same scored records; also when the processor
// is SIGKILLed once mid-run and restarted.
func TestRolloutWorkersToTrainer(t *testing.T) {
	py := projectPython(t)
	for _, kill := range []bool{false, true} {
		name := "clean"
		if kill {
			name = "processor_sigkilled"
		}
		t.Run(name, func(t *testing.T) {
			brokers := startBroker(t)
			runArgs := []string{"run", "--brokers", brokers, "--create-topics", "4", "--log-level", "warn",
				"--commit-interval", "200ms", "--metrics-addr=", "--scorers", "local"}
			run := startProc(t, os.Environ(), creditflowBin(t), runArgs...)
			const groups, size = 3, 4
			expect := 2 * 2 * groups * size
			outPath := filepath.Join(t.TempDir(), "trainer.jsonl")
			trainer := startProc(t, pyEnv(t), py, "examples/python/trainer.py", "--brokers", brokers,
				"--expect", itoa(expect), "--timeout", "150", "--batch", "8", "--out", outPath)

			published := publishBoth(t, py, brokers, 0, groups, size)
			if kill {
				deadline := time.Now().Add(90 * time.Second)
				for countLines(outPath) < 4 && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if countLines(outPath) < 4 {
					t.Fatalf("no samples before the kill\nprocessor:\n%s\ntrainer:\n%s", run.out.String(), trainer.out.String())
				}
				run.kill()
				t.Logf("SIGKILLed the processor after %d samples", countLines(outPath))
				run = startProc(t, os.Environ(), creditflowBin(t), runArgs...)
			}
			published = append(published, publishBoth(t, py, brokers, groups, groups, size)...)
			if err := trainer.wait(t, 200*time.Second); err != nil {
				t.Fatalf("trainer: %v\n%s\nprocessor:\n%s", err, trainer.out.String(), run.out.String())
			}
			t.Logf("trainer: %s", strings.TrimSpace(trainer.out.String()))
			sort.Strings(published)
			if len(published) != expect {
				t.Fatalf("published %d, want %d", len(published), expect)
			}
			checkExactlyOnce(t, brokers, published, readTrainerOut(t, outPath))
		})
	}
}
