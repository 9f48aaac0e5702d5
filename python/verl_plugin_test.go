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
	"strings"
	"testing"
	"time"
)

type verlRow struct {
	TrajectoryID  *string   `json:"trajectory_id"`
	InputIDs      []int     `json:"input_ids"`
	Mask          []int     `json:"mask"`
	Advantage     []float64 `json:"advantage"`
	PolicyVersion int       `json:"policy_version"`
	Published     *struct {
		PolicyVersion   int      `json:"policy_version"`
		Reward          float64  `json:"reward"`
		GoldAnswers     []string `json:"gold_answers"`
		GroupSize       int      `json:"group_size"`
		Turns           int      `json:"turns"`
		RolloutLogprobs int      `json:"rollout_logprobs"`
	} `json:"published"`
}

type verlSummary struct {
	Registered string    `json:"registered"`
	WaitS      []float64 `json:"wait_s"`
	Hook       string    `json:"hook"`
	Missing    *struct {
		IDs     []string `json:"ids"`
		Message string   `json:"message"`
	} `json:"missing"`
	Announced *struct {
		Version    int    `json:"version"`
		Checkpoint string `json:"checkpoint"`
	} `json:"announced"`
	Refused       map[string]*string `json:"refused"`
	LayoutChecked int                `json:"layout_checked"`
}

// TestVerlPlugin: `import verl` registers creditflow.integrations.verl's trainer through the
// verl.plugins entry point; verl's own records (AgentLoopOutput, put into a real
// TransferQueue on a local Ray) go through the registered trainer's _compute_advantage
// against `creditflow broker` and `creditflow run` (in-process tiny scorer). The advantages
// it writes back to TransferQueue equal `creditflow compute` on the scored records on
// response_mask's 1s and are 0 on tool tokens; returns equal advantages; a timeout names the
// trajectories without samples; a saved checkpoint's global_step_N/actor/huggingface is
// announced on the policy topic; the advantages have the layout verl's own colocate_async
// trainer writes. python/tests/verl_group.py says what runs for real.
func TestVerlPlugin(t *testing.T) {
	py := verlPython(t)
	brokers := startBroker(t)
	run := startProc(t, os.Environ(), creditflowBin(t), "run", "--brokers", brokers, "--create-topics", "4",
		"--log-level", "warn", "--commit-interval", "200ms", "--metrics-addr=", "--scorers", "local")
	const groups = 3
	out := filepath.Join(t.TempDir(), "verl.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "python/tests/verl_group.py", "--brokers", brokers, "--groups", itoa(groups),
		"--out", out)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(pyEnv(t), "RAY_USAGE_STATS_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("verl_group.py: %v\n%s\nprocessor:\n%s", err, b, run.out.String())
	}

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []verlRow
	var sum verlSummary
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"summary": true`)) {
			if err := json.Unmarshal(sc.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var r verlRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if sum.Registered != "creditflow.integrations.verl.CreditflowTrainer" {
		t.Errorf("get_trainer_cls(\"creditflow\") after import verl: %q, want the plug-in's trainer", sum.Registered)
	}

	ref := computeAdvantages(t, brokers)
	compared, unpublished, toolTokens, perToken := 0, 0, 0, 0
	for _, r := range rows {
		if len(r.Advantage) != len(r.InputIDs) || len(r.Mask) != len(r.InputIDs) {
			t.Fatalf("row of %d tokens with %d advantages, %d mask entries", len(r.InputIDs), len(r.Advantage), len(r.Mask))
		}
		if r.TrajectoryID == nil { // no policy token: not published, advantage 0
			unpublished++
			for i, a := range r.Advantage {
				if a != 0 {
					t.Errorf("unpublished row: advantage %v at token %d, want 0", a, i)
					break
				}
			}
			continue
		}
		id := *r.TrajectoryID
		want, ok := ref[id]
		if !ok {
			t.Errorf("compute has no result for %s", id)
			continue
		}
		if len(want) != len(r.InputIDs) {
			t.Errorf("%s: compute gives %d advantages for %d tokens", id, len(want), len(r.InputIDs))
			continue
		}
		first := slices.Index(r.Mask, 1)
		distinct := map[float64]bool{}
		for i, m := range r.Mask {
			if m == 0 {
				if i > first {
					toolTokens++
				}
				if r.Advantage[i] != 0 {
					t.Errorf("%s token %d (response_mask 0): advantage %v, want 0", id, i, r.Advantage[i])
				}
				continue
			}
			wf := float64(float32(want[i]))
			if math.Abs(r.Advantage[i]-wf) > 1e-6*math.Max(1, math.Abs(wf)) {
				t.Errorf("%s token %d: advantage %v written to TransferQueue, compute %v", id, i, r.Advantage[i], want[i])
				break
			}
			distinct[r.Advantage[i]] = true
		}
		if len(distinct) > 1 {
			perToken++
		}
		checkPublished(t, id, r)
		compared++
	}
	if compared != groups*4 || unpublished != groups {
		t.Errorf("compared %d trajectories with compute and saw %d unpublished, want %d and %d", compared, unpublished, groups*4, groups)
	}
	if toolTokens == 0 || perToken == 0 {
		t.Errorf("%d tool tokens, %d trajectories with more than one advantage value: the group exercises neither", toolTokens, perToken)
	}
	if sum.Missing == nil || len(sum.Missing.IDs) != 4 || !strings.Contains(sum.Missing.Message, sum.Missing.IDs[0]) {
		t.Errorf("timeout: %+v, want the 4 trajectory ids named", sum.Missing)
	}
	for _, k := range []string{"use_kl_in_reward", "hf_model"} {
		if msg := sum.Refused[k]; msg == nil || !strings.Contains(*msg, k) {
			t.Errorf("a config with %s: the trainer was built (%v), want a ValueError naming it", k, msg)
		}
	}
	if sum.LayoutChecked != 5 {
		t.Errorf("compared the layout of %d rows with verl's own colocate_async trainer, want 5", sum.LayoutChecked)
	}
	if sum.Hook != "AnnouncePolicy" {
		t.Errorf("the trainer's checkpoint callback is %s, want AnnouncePolicy", sum.Hook)
	}
	if a := sum.Announced; a == nil || a.Version != 4 || !strings.HasSuffix(a.Checkpoint, "/global_step_4/actor/huggingface") {
		t.Errorf("announced %+v, want version 4 at .../global_step_4/actor/huggingface", a)
	}
	t.Logf("%d trajectories equal to compute (%d with several advantage values, %d tool tokens at 0); _compute_advantage per group: %.3f s",
		compared, perToken, toolTokens, sum.WaitS)
}

// checkPublished: the trajectory the plug-in published for a row carries the policy version
// of the row's min_global_steps tag, the reward from rm_scores, the gold answer from
// reward_model.ground_truth, the group of its uid (4 members with a policy token), one turn
// per run of response_mask 1s and a rollout log-prob per policy token.
func checkPublished(t *testing.T, id string, r verlRow) {
	t.Helper()
	p := r.Published
	if p == nil {
		t.Errorf("%s: not found on the trajectories topic", id)
		return
	}
	wantReward := 0.0
	if strings.HasSuffix(id, "_0_0") || strings.HasSuffix(id, "_2_0") { // the two right answers
		wantReward = 1
	}
	policy, runs := 0, 0
	for i, m := range r.Mask {
		if m == 1 {
			policy++
			if i == 0 || r.Mask[i-1] == 0 {
				runs++
			}
		}
	}
	if p.PolicyVersion != r.PolicyVersion || p.Reward != wantReward || !slices.Equal(p.GoldAnswers, []string{"Paris"}) ||
		p.GroupSize != 4 || p.Turns != runs || p.RolloutLogprobs != policy {
		t.Errorf("%s published %+v; want policy version %d, reward %v, gold [Paris], group of 4, %d turns, %d log-probs",
			id, *p, r.PolicyVersion, wantReward, runs, policy)
	}
}
