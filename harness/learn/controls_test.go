package learn_test

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/learn"
)

// TestLearnLikelihoodRewardArm runs the noisy-judge control `--compare grpo+likelihood` for
// one step end to end: the workers publish the gold answer's likelihood as the reward (a
// number in (0, 1), not a verdict), GRPO trains on it, and the run records the arm. A batch
// of judge verdicts would have a mean reward of k/10 exactly; this one does not.
func TestLearnLikelihoodRewardArm(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of CPU")
	}
	out := t.TempDir() + "/cmp"
	runLearnCLI(t, 10*time.Minute, "--compare", "grpo+likelihood", "--seeds", "1", "--world", "widesearch",
		"--judge-noise", "0.3", "--steps", "1", "--groups-per-step", "2", "--eval-episodes", "8", "--out", out)
	runs, err := learn.LoadRuns(out + ".json")
	if err != nil || len(runs) != 1 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	s := runs[0]
	if s.Arm() != "grpo+likelihood" || s.Settings.Reward != "likelihood" || s.Settings.Lambda != 0 || len(s.Steps) != 1 {
		t.Fatalf("arm %s, settings %+v, %d steps", s.Arm(), s.Settings, len(s.Steps))
	}
	st := s.Steps[0]
	k := st.RewardMean * float64(st.Samples)
	t.Logf("%d samples, mean reward %.6f", st.Samples, st.RewardMean)
	if st.Samples != 10 || !(st.RewardMean > 0 && st.RewardMean < 1) || math.Abs(k-math.Round(k)) < 1e-6 {
		t.Errorf("%d samples with mean reward %v: want 10 with likelihoods, not verdicts", st.Samples, st.RewardMean)
	}
	md, _ := os.ReadFile(out + ".md")
	if !strings.Contains(string(md), "| grpo+likelihood | widesearch | 1 |") {
		t.Errorf("the table does not name the arm:\n%s", md)
	}
}
