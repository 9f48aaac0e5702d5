package learn_test

import (
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/learn"
)

// TestLearnOracleArm runs `creditflow learn --method oracle` on the rumour world for two
// short steps, end to end: the workers write each trajectory's turn labels, the processor
// computes GRPO's advantages, and the trainer adds ±λ on the labelled turns' action tokens
// of real samples (it stops the run when a sample's turns cannot be mapped or have no
// labels). It asserts that every step's batch carried labelled turns and that the term
// landed on tokens of both signs, and that the settings record the method and its λ.
func TestLearnOracleArm(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of CPU")
	}
	out, _ := runLearnCLI(t, 10*time.Minute, "--method", "oracle", "--world", "rumour", "--lambda", "0.5",
		"--steps", "2", "--groups-per-step", "2", "--eval-episodes", "16", "--json", "--dir", t.TempDir())
	var s learn.Summary
	lastJSON(t, out, &s)
	if s.Method != "oracle" || s.Settings == nil || s.Settings.Lambda != 0.5 || s.Settings.Loss != "pg" || s.PolicyVersions != 2 {
		t.Fatalf("method %s, %d versions, settings %+v; want oracle, 2 versions, λ 0.5, loss pg", s.Method, s.PolicyVersions, s.Settings)
	}
	if len(s.Steps) != 2 || s.UnusedShare > 0.1 || s.Lost != 0 {
		t.Errorf("%d step records, unused %.3f, lost %d; want 2, at most 0.1, 0", len(s.Steps), s.UnusedShare, s.Lost)
	}
	var plus, minus int
	for i, st := range s.Steps {
		if st.OracleKeyTurns == nil || st.OracleHarmfulTurns == nil || st.OracleTokensPlus == nil || st.OracleTokensMinus == nil {
			t.Fatalf("step %d has no oracle counts: %+v", i+1, st)
		}
		t.Logf("step %d: %d key and %d harmful turns, +λ on %d tokens, −λ on %d; grad norm %.4f",
			i+1, *st.OracleKeyTurns, *st.OracleHarmfulTurns, *st.OracleTokensPlus, *st.OracleTokensMinus, st.GradNorm)
		if *st.OracleHarmfulTurns == 0 || *st.OracleTokensMinus == 0 || !(st.GradNorm > 0) {
			t.Errorf("step %d: %d harmful turns, %d tokens at −λ, grad norm %v: the start meets a rumour in most episodes",
				i+1, *st.OracleHarmfulTurns, *st.OracleTokensMinus, st.GradNorm)
		}
		plus += *st.OracleTokensPlus
		minus += *st.OracleTokensMinus
	}
	if plus == 0 || minus == 0 {
		t.Errorf("+λ on %d tokens and −λ on %d over the run; want both", plus, minus)
	}
}

// TestLearnPPOOracleOnce runs the oracle control of AttnSR's PPO setup (`--method ppo
// --oracle-steps --oracle-once`) on household-long for one short step, end to end: the
// trainer adds the oracle's step rewards (one token per paid turn) to PPO's terminal reward
// before GAE with the critic. It asserts the settings that keep the arm apart, the critic's
// value loss, and that no more tokens were paid than the labels allow once each (a key turn
// and the walk before it per trajectory, at most, plus every harmful turn).
func TestLearnPPOOracleOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of CPU")
	}
	out, _ := runLearnCLI(t, 10*time.Minute, "--method", "ppo", "--oracle-steps", "--oracle-once", "--lambda", "0.25",
		"--world", "household-long", "--steps", "1", "--groups-per-step", "2", "--eval-episodes", "8", "--json", "--dir", t.TempDir())
	var s learn.Summary
	lastJSON(t, out, &s)
	st := s.Settings
	if s.Method != "ppo" || st == nil || !st.OracleSteps || !st.OracleOnce || st.Lambda != 0.25 || st.Loss != "ppo" || s.Arm() != "ppo+oracle+once" {
		t.Fatalf("method %s, arm %s, settings %+v; want ppo, ppo+oracle+once, λ 0.25, loss ppo", s.Method, s.Arm(), st)
	}
	if len(s.Steps) != 1 || s.Lost != 0 {
		t.Fatalf("%d step records, lost %d; want 1, 0", len(s.Steps), s.Lost)
	}
	x := s.Steps[0]
	if x.OracleEnablingTurns == nil || x.OracleTokensPlus == nil || x.OracleHarmfulTurns == nil || x.OracleTokensMinus == nil || x.ValueLoss == nil {
		t.Fatalf("the step has no oracle counts or value loss: %+v", x)
	}
	t.Logf("%d samples: %d walks into the office, %d desk openings, %d old notes; paid +λ on %d tokens, −λ on %d; value loss %v",
		x.Samples, *x.OracleEnablingTurns, *x.OracleKeyTurns, *x.OracleHarmfulTurns, *x.OracleTokensPlus, *x.OracleTokensMinus, *x.ValueLoss)
	if *x.OracleTokensPlus > 2*x.Samples || *x.OracleTokensMinus != *x.OracleHarmfulTurns {
		t.Errorf("paid +λ on %d tokens for %d samples (at most two each), −λ on %d for %d old notes (one each)",
			*x.OracleTokensPlus, x.Samples, *x.OracleTokensMinus, *x.OracleHarmfulTurns)
	}
	if *x.OracleEnablingTurns == 0 {
		t.Errorf("no walk into the office in %d episodes of the start policy", x.Samples)
	}
}
