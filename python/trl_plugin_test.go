package python_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type trlRow struct {
	TrajectoryID   *string   `json:"trajectory_id"`
	InputIDs       []int     `json:"input_ids"`
	CompletionMask []int     `json:"completion_mask"`
	Advantage      []float64 `json:"advantage"`
	Reward         *float64  `json:"reward"`
	ModelVersion   int       `json:"model_version"`
}

type trlSummary struct {
	WaitS              []float64        `json:"wait_s"`
	PackedTermsChecked int              `json:"packed_terms_checked"`
	Missing            *pluginMissing   `json:"missing"`
	Announced          *pluginAnnounced `json:"announced"`
	CheckpointFiles    []string         `json:"checkpoint_files"`
	Collator           string           `json:"collator"`
	TrainerPackedTerms int              `json:"trainer_packed_terms"`
}

// TestTRLAsyncGRPOPlugin: groups built by TRL's own AsyncGRPO pieces (rows from its turn
// reconciliation, rewards from its `_score_group`) go through creditflow.integrations.trl
// against `creditflow broker` and `creditflow run` (in-process tiny scorer). The per-token
// advantages handed to TRL equal `creditflow compute` on the scored records, on
// completion_mask's 1s, and are 0 on prompt and tool tokens; TRL's packer carries them
// token by token, also through CreditflowAsyncGRPOTrainer's own data loader; a timeout
// names the trajectories without samples; a checkpoint the trainer saves is announced on
// the policy topic. python/tests/trl_group.py says what runs for real.
func TestTRLAsyncGRPOPlugin(t *testing.T) {
	py := trlPython(t)
	const groups = 3
	brokers, out := runPluginScript(t, py, "python/tests/trl_group.py", groups, "TRL_EXPERIMENTAL_SILENCE=1")
	rows, sum := readPluginOutput[trlRow, trlSummary](t, out)
	ref := computeAdvantages(t, brokers)
	compared, unscored, toolTokens, perToken := 0, 0, 0, 0
	for _, r := range rows {
		if len(r.Advantage) != len(r.InputIDs) || len(r.CompletionMask) != len(r.InputIDs) {
			t.Fatalf("row of %d tokens with %d advantages, %d mask entries", len(r.InputIDs), len(r.Advantage), len(r.CompletionMask))
		}
		if r.TrajectoryID == nil { // TRL could not score it: advantage 0, as in TRL
			unscored++
			checkZero(t, r.Advantage)
			continue
		}
		id := *r.TrajectoryID
		tool, several, ok := compareWithCompute(t, ref, id, r.Advantage, r.CompletionMask, "handed to TRL")
		if !ok {
			continue
		}
		toolTokens += tool
		if several {
			perToken++
		}
		if !strings.HasPrefix(id, "trltest-g"+itoa(r.ModelVersion)+"-") {
			t.Errorf("%s: model_version %d, want the group's", id, r.ModelVersion)
		}
		compared++
	}
	if compared != groups*4 || unscored != groups {
		t.Errorf("compared %d rows with compute and saw %d unscored, want %d and %d", compared, unscored, groups*4, groups)
	}
	if toolTokens == 0 || perToken == 0 {
		t.Errorf("%d tool tokens, %d rows with more than one advantage value: the group exercises neither", toolTokens, perToken)
	}
	if sum.PackedTermsChecked == 0 {
		t.Error("the collator's packed advantages were not checked")
	}
	if sum.Missing == nil || len(sum.Missing.IDs) != 4 || !strings.Contains(sum.Missing.Message, sum.Missing.IDs[0]) {
		t.Errorf("timeout: %+v, want the 4 trajectory ids named", sum.Missing)
	}
	if sum.Collator != "PerTokenAdvantageCollator" || sum.TrainerPackedTerms == 0 {
		t.Errorf("the trainer's data loader used %q and packed %d terms", sum.Collator, sum.TrainerPackedTerms)
	}
	if a := sum.Announced; a == nil || a.Version != 2 || filepath.Base(a.Checkpoint) != "checkpoint-4" {
		t.Errorf("announced %+v, want model version 2 at .../checkpoint-4", a)
	}
	if !slices.Contains(sum.CheckpointFiles, "config.json") || !slices.Contains(sum.CheckpointFiles, "model.safetensors") {
		t.Errorf("checkpoint files %v: not a Hugging Face folder", sum.CheckpointFiles)
	}
	t.Logf("%d rows equal to compute (%d with several advantage values, %d tool tokens at 0); _score_group per group: %.3f s",
		compared, perToken, toolTokens, sum.WaitS)
}
