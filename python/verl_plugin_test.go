package python_test

import (
	"slices"
	"strings"
	"testing"
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
	Registered    string             `json:"registered"`
	WaitS         []float64          `json:"wait_s"`
	Hook          string             `json:"hook"`
	Missing       *pluginMissing     `json:"missing"`
	Announced     *pluginAnnounced   `json:"announced"`
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
	const groups = 3
	brokers, out := runPluginScript(t, py, "python/tests/verl_group.py", groups, "RAY_USAGE_STATS_ENABLED=0")
	rows, sum := readPluginOutput[verlRow, verlSummary](t, out)
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
			checkZero(t, r.Advantage)
			continue
		}
		id := *r.TrajectoryID
		tool, several, ok := compareWithCompute(t, ref, id, r.Advantage, r.Mask, "written to TransferQueue")
		if !ok {
			continue
		}
		toolTokens += tool
		if several {
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
