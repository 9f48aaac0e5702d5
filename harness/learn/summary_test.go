package learn

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTrainerLinesToSummary: the trainer's step lines become the summary's
// per-step diagnostics, its error line the run's error, and the unused
// trajectories are the published ones it never trained on.
func TestTrainerLinesToSummary(t *testing.T) {
	r := &run{o: Defaults(), pubIDs: map[string]bool{}, stepCh: make(chan int, 4), stepTraj: map[int64]int{0: 0}}
	for _, line := range []string{
		`{"event":"published","trajectory_ids":["a","b","c","d"],"seconds":1}`,
		`{"event":"step","trainer_step":1,"policy_version":1,"samples":3,"trajectories":3,"loss":-0.05,"clip_fraction":0.01,"grad_norm":0.2,"grad_norm_max":1.5,"grad_clip_hits":1,"approx_kl":0.003,"is_truncated":0.02,"entropy":0.4,"value_loss":0.06,"value_loss_after":0.05,"step_rewards_nonzero":9,"step_rewards_abs_sum":0.5}`,
		`{"event":"error","message":"sample s1-g000001-0 (method attnsr, output token_rewards) has no advantages: the pg loss needs them"}`,
		`{"event":"done","trainer_steps":1,"policy_versions":1,"trajectories":3}`,
	} {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatal(err)
		}
		r.onLine("trainer", obj)
	}
	s := Summary{Trajectories: 4, Seconds: 10}
	r.fill(&s, 0)
	if len(s.Steps) != 1 {
		t.Fatalf("steps %+v", s.Steps)
	}
	st := s.Steps[0]
	if st.ClipFraction != 0.01 || st.GradNorm != 0.2 || st.GradClipHits != 1 || st.ApproxKL != 0.003 || st.Entropy != 0.4 ||
		st.ValueLoss == nil || *st.ValueLoss != 0.06 || st.StepRewardsNonzero == nil || *st.StepRewardsNonzero != 9 {
		t.Errorf("step %+v", st)
	}
	if s.UnusedTrajectories != 1 || s.UnusedShare != 0.25 {
		t.Errorf("unused %d (%v), want 1 of 4", s.UnusedTrajectories, s.UnusedShare)
	}
	if msg := r.trainerError(); !strings.Contains(msg, "has no advantages") {
		t.Errorf("trainer error %q", msg)
	}
	b, _ := json.Marshal(s.Steps[0])
	if !strings.Contains(string(b), `"value_loss":0.06`) {
		t.Errorf("step JSON %s", b)
	}
	// without a critic the value loss is absent, not 0
	b, _ = json.Marshal(TrainerStep{Step: 1})
	if strings.Contains(string(b), "value_loss") {
		t.Errorf("step JSON without a critic %s", b)
	}
}

// TestMethodsToProcessorAndTrainer: each method's credit flags and loss.
func TestMethodsToProcessorAndTrainer(t *testing.T) {
	for _, c := range []struct {
		method, output string
		args, loss     string
	}{
		{MethodLAPO, "grpo", "--method lapo --lambda 0.5 --direction backward", "pg"},
		{MethodGRPO, "grpo", "--method lapo --lambda 0", "pg"},
		{MethodAttnSR, "grpo", "--method attnsr --attnsr-output grpo --beta 0.25", "pg"},
		{MethodAttnSR, "ppo", "--method attnsr --attnsr-output ppo --beta 0.25", "ppo"},
		{MethodPPO, "grpo", "--method attnsr --attnsr-output ppo --beta 0", "ppo"},
		{MethodOracle, "grpo", "--method lapo --lambda 0", "pg"}, // GRPO's stream; the trainer adds ±λ
	} {
		o := Defaults()
		o.Method, o.AttnSROutput = c.method, c.output
		if got := strings.Join(o.processorArgs(), " "); got != c.args || o.loss() != c.loss {
			t.Errorf("%s/%s: %q, loss %s; want %q, %s", c.method, c.output, got, o.loss(), c.args, c.loss)
		}
	}
	// The oracle arm records its λ, so that --from keeps runs of another λ apart.
	o := Defaults()
	o.Method, o.Lambda = MethodOracle, 0.25
	if s := settingsOf(o); s.Lambda != 0.25 || s.Loss != "pg" {
		t.Errorf("oracle settings %+v: want λ 0.25, loss pg", s)
	}
	other := o
	other.Lambda = 0.5
	if d := settingsOf(o).diff(*settingsOf(other)); d != "lambda 0.25, not 0.5" {
		t.Errorf("oracle runs of λ 0.25 and 0.5 differ by %q", d)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("--method oracle: %v", err)
	}
	o = Defaults()
	o.GroupsPerStep, o.Workers = 3, 2
	if o.quota(0) != 2 || o.quota(1) != 1 {
		t.Errorf("3 groups over 2 workers: %d and %d", o.quota(0), o.quota(1))
	}
	o.GroupsPerVersion = 4
	if o.quota(1) != 4 {
		t.Errorf("--groups-per-version 4: %d", o.quota(1))
	}
}
