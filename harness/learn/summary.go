package learn

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/creditflow/creditflow/vocab"
)

// Eval is the held-out evaluation of one policy version.
type Eval struct {
	PolicyVersion int64   `json:"policy_version"`
	TrainerStep   int     `json:"trainer_step"`
	Trajectories  int     `json:"trajectories"` // consumed by the trainer before this version
	SuccessRate   float64 `json:"success_rate"`
	RewardMean    float64 `json:"reward_mean"`
	FoundRate     float64 `json:"found_rate"` // episodes in which a turn revealed the evidence
	Seconds       float64 `json:"seconds"`    // since the trainer started
}

// TrainerStep is what the trainer measured at one step (docs/learn.md,
// "What a run reports").
type TrainerStep struct {
	Step         int     `json:"trainer_step"`
	Samples      int     `json:"samples"`
	RewardMean   float64 `json:"reward_mean"`
	Loss         float64 `json:"loss"`
	ClipFraction float64 `json:"clip_fraction"` // policy tokens whose ratio to the policy before the update left [1−ε, 1+ε], last optimizer step
	GradNorm     float64 `json:"grad_norm"`     // before clipping, last optimizer step
	GradNormMax  float64 `json:"grad_norm_max"`
	GradClipHits int     `json:"grad_clip_hits"` // optimizer steps whose gradient norm exceeded 1 and was scaled down
	ApproxKL     float64 `json:"approx_kl"`      // of the policy before the update to the behaviour policy (k3 estimate)
	ISTruncated  float64 `json:"is_truncated"`   // policy tokens whose importance weight hit the cap
	Entropy      float64 `json:"entropy"`        // mean entropy of the policy at the policy tokens
	// With a critic (the ppo loss): the value loss before and after the
	// step's updates, and the step rewards the batch carried besides the
	// terminal rewards (their count and summed absolute value).
	ValueLoss          *float64 `json:"value_loss,omitempty"`
	ValueLossAfter     *float64 `json:"value_loss_after,omitempty"`
	StepRewardsNonzero *int     `json:"step_rewards_nonzero,omitempty"`
	StepRewardsAbsSum  *float64 `json:"step_rewards_abs_sum,omitempty"`
	// The oracle arm: the turns the batch's labels named (key, enabling,
	// harmful) and the policy tokens its ±λ landed on.
	OracleKeyTurns      *int `json:"oracle_key_turns,omitempty"`
	OracleEnablingTurns *int `json:"oracle_enabling_turns,omitempty"`
	OracleHarmfulTurns  *int `json:"oracle_harmful_turns,omitempty"`
	OracleTokensPlus    *int `json:"oracle_tokens_plus,omitempty"`
	OracleTokensMinus   *int `json:"oracle_tokens_minus,omitempty"`
	// --attnsr-terminal: the samples whose step rewards the trainer moved
	// onto the terminal token.
	RewardsMovedRows *int `json:"rewards_moved_rows,omitempty"`
	// AttnSR: where the batch's step shares p_k landed on the turns the
	// world labelled, paid once (creditflow.learn.allocation), against an
	// even spread: sums over the samples with at least two non-terminal
	// steps.
	*Allocation
}

// Allocation is one step's alloc_* fields (or several steps' sums).
type Allocation struct {
	Samples           int     `json:"alloc_samples"`
	HelpfulSamples    int     `json:"alloc_helpful_samples"`
	HelpfulP          float64 `json:"alloc_helpful_p"`
	HelpfulEven       float64 `json:"alloc_helpful_even"`
	HelpfulLen        float64 `json:"alloc_helpful_len,omitempty"` // the share by length (absent before it was read)
	HelpfulTop        float64 `json:"alloc_helpful_top"`           // ties split among the tied moves
	HelpfulReward     float64 `json:"alloc_helpful_reward"`
	HelpfulRewardEven float64 `json:"alloc_helpful_reward_even"`
	HarmfulSamples    int     `json:"alloc_harmful_samples"`
	HarmfulP          float64 `json:"alloc_harmful_p"`
	HarmfulEven       float64 `json:"alloc_harmful_even"`
	HarmfulLen        float64 `json:"alloc_harmful_len,omitempty"`
	HarmfulTop        float64 `json:"alloc_harmful_top"`
	HarmfulReward     float64 `json:"alloc_harmful_reward"`
	HarmfulRewardEven float64 `json:"alloc_harmful_reward_even"`
}

// Summary is what a run measured. JSON names are stable.
type Summary struct {
	Method                       string             `json:"method"`
	World                        string             `json:"world"`
	Seed                         int                `json:"seed"`
	Seconds                      float64            `json:"seconds"`
	PolicyVersions               int64              `json:"policy_versions"` // versions announced after the start
	TrainerSteps                 int                `json:"trainer_steps"`
	InitialSuccess               float64            `json:"initial_success"`
	FinalSuccess                 float64            `json:"final_success"`
	Eval                         []Eval             `json:"eval"`
	Steps                        []TrainerStep      `json:"steps,omitempty"`
	Trajectories                 int                `json:"trajectories"` // published by the workers
	TrainerTrajectories          int                `json:"trainer_trajectories"`
	UnusedTrajectories           int                `json:"unused_trajectories"` // published, never trained on
	UnusedShare                  float64            `json:"unused_share"`
	SamplesByPolicyVersion       map[string]int     `json:"samples_by_policy_version"`
	SamplesByScorerPolicyVersion map[string]int     `json:"samples_by_scorer_policy_version"`
	StaleSamples                 int64              `json:"stale_samples"`            // routed to the stale topic by the processor
	StaleSkipped                 int                `json:"stale_skipped_by_trainer"` // went stale while waiting in the samples topic
	Lost                         int                `json:"lost"`
	DuplicatesDropped            int                `json:"duplicates_dropped"`
	ReloadSecondsP50             *float64           `json:"reload_seconds_p50"`
	ReloadSeconds                []float64          `json:"reload_seconds"`
	TrainerWaitShare             float64            `json:"trainer_wait_share"`
	Shares                       map[string]float64 `json:"time_shares"` // sampling, scoring, training, evaluation, waiting
	Bound                        string             `json:"bound"`
	ProcessorKills               int                `json:"processor_kills"`
	WorkerKills                  int                `json:"worker_kills"`
	// Settings are the options that decide what the run learns (absent in
	// summaries written before they were recorded).
	Settings *Settings `json:"settings,omitempty"`
	// Commit is the source the run was built from (recorded, not compared:
	// --from joins runs by their settings).
	Commit string `json:"commit,omitempty"`
}

// Settings are the options of a run that change its learning curve; two
// runs of one method and seed with equal settings measure the same thing.
// Fields that do not apply to a run's method are zero.
type Settings struct {
	Method           string  `json:"method"`
	World            string  `json:"world"`
	Steps            int     `json:"steps"`
	GroupsPerStep    int     `json:"groups_per_step"`
	GroupSize        int     `json:"group_size"`
	Workers          int     `json:"workers"`
	GroupsPerVersion int     `json:"groups_per_version"` // 0: each worker's share of groups_per_step
	MaxPolicyLag     int64   `json:"max_policy_lag"`
	LR               float64 `json:"lr"`
	EvalEpisodes     int     `json:"eval_episodes"`
	Chaos            bool    `json:"chaos,omitempty"`
	JudgeNoise       float64 `json:"judge_noise"`
	Loss             string  `json:"loss"`   // pg (creditflow's advantages) or ppo (GAE with a critic over token rewards)
	Epochs           int     `json:"epochs"` // optimizer steps per batch
	Clip             float64 `json:"clip"`
	ISCap            float64 `json:"is_cap"`
	Lambda           float64 `json:"lambda"`              // LAPO's λ (0: GRPO); the oracle arm's ±λ
	Direction        string  `json:"direction,omitempty"` // LAPO's: backward or forward
	NoGate           bool    `json:"no_gate,omitempty"`
	AttnSROutput     string  `json:"attnsr_output,omitempty"` // grpo or ppo
	Beta             float64 `json:"beta,omitempty"`          // AttnSR's β
	Gamma            float64 `json:"gamma,omitempty"`         // ppo loss: GAE's γ
	GAELambda        float64 `json:"gae_lambda,omitempty"`
	CriticLR         float64 `json:"critic_lr,omitempty"`
	// The noisy-judge controls: the published reward when not the judge's
	// verdict (likelihood, gold-bonus), the bonus, and the label-noise arm.
	Reward     string  `json:"reward,omitempty"`
	GoldBonus  float64 `json:"gold_bonus,omitempty"`
	LabelNoise bool    `json:"label_noise,omitempty"`
	// PPO with the oracle's step rewards of size Lambda (the arm ppo+oracle).
	OracleSteps bool `json:"oracle_steps,omitempty"`
	// The oracle arms: each label paid once (the first key turn, the
	// enabling turn before it, every harmful turn).
	OracleOnce bool `json:"oracle_once,omitempty"`
	// AttnSR's step budget spread evenly over the moves (ρ = η = 0).
	AttnSRUniform bool `json:"attnsr_uniform,omitempty"`
	// AttnSR's step rewards moved by the trainer onto the terminal token.
	AttnSRTerminal bool `json:"attnsr_terminal,omitempty"`
}

// settingsOf is what o records in a summary (o with its defaults resolved).
func settingsOf(o Options) *Settings {
	s := &Settings{Method: o.Method, World: o.World, Steps: o.Steps, GroupsPerStep: o.GroupsPerStep, GroupSize: o.GroupSize,
		Workers: o.Workers, GroupsPerVersion: o.GroupsPerVersion, MaxPolicyLag: o.MaxPolicyLag, LR: o.LR,
		EvalEpisodes: o.EvalEpisodes, Chaos: o.Chaos, JudgeNoise: o.JudgeNoise, Loss: o.loss(), Epochs: o.Epochs,
		Clip: o.Clip, ISCap: o.ISCap}
	switch o.Method {
	case MethodLAPO:
		s.Lambda, s.Direction, s.NoGate = o.Lambda, o.Direction, o.NoGate
	case MethodOracle:
		s.Lambda = o.Lambda
	case MethodAttnSR:
		s.AttnSROutput, s.Beta, s.AttnSRUniform, s.AttnSRTerminal = o.AttnSROutput, o.Beta, o.AttnSRUniform, o.AttnSRTerminal
	case MethodPPO:
		s.AttnSROutput = string(vocab.OutputPPO)
		if o.OracleSteps {
			s.OracleSteps, s.Lambda = true, o.Lambda
		}
	}
	if o.Reward != "" && o.Reward != RewardJudge {
		s.Reward = o.Reward
		if o.Reward == RewardGoldBonus || o.Reward == RewardLikelihoodBonus {
			s.GoldBonus = o.GoldBonus
		}
	}
	s.LabelNoise = o.LabelNoise
	s.OracleOnce = o.OracleOnce && o.oracle()
	if s.Loss == "ppo" {
		s.Gamma, s.GAELambda, s.CriticLR = o.Gamma, o.GAELambda, o.CriticLR
	}
	return s
}

// diff names the settings in which a differs from b ("" when equal).
func (a Settings) diff(b Settings) string {
	var ma, mb map[string]any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	keys := map[string]bool{}
	for k := range ma {
		keys[k] = true
	}
	for k := range mb {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if fmt.Sprint(ma[k]) != fmt.Sprint(mb[k]) {
			out = append(out, fmt.Sprintf("%s %v, not %v", k, orNone(ma[k]), orNone(mb[k])))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

func orNone(v any) any {
	if v == nil {
		return "unset"
	}
	return v
}

// sourceCommit is the commit the binary was built from (with "+dirty" when
// the tree had changes), or, for `go run`, which does not stamp one, the
// working directory's git HEAD; "" when neither is known.
func sourceCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "+dirty"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
		rev += "+dirty"
	}
	return rev
}

// fill completes the summary from the evaluations and the trainer's last line.
func (r *run) fill(s *Summary, procCPU float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Eval = append([]Eval(nil), r.evals...)
	sort.SliceStable(s.Eval, func(i, j int) bool { return s.Eval[i].PolicyVersion < s.Eval[j].PolicyVersion })
	for i := range s.Eval { // an evaluation can be read before the trainer's step line
		s.Eval[i].Trajectories = r.stepTraj[s.Eval[i].PolicyVersion]
	}
	if len(s.Eval) > 0 {
		s.InitialSuccess = s.Eval[0].SuccessRate
		s.FinalSuccess = s.Eval[len(s.Eval)-1].SuccessRate
	}
	d := r.done
	if d == nil {
		d = map[string]any{}
	}
	s.PolicyVersions = int64(num(d["policy_versions"]))
	s.TrainerSteps = int(num(d["trainer_steps"]))
	s.TrainerTrajectories = int(num(d["trajectories"]))
	s.DuplicatesDropped = int(num(d["duplicates_dropped"]))
	s.StaleSkipped = int(num(d["stale_skipped"]))
	s.TrainerWaitShare = num(d["trainer_wait_share"])
	s.SamplesByPolicyVersion = counts(d["samples_by_policy_version"])
	s.SamplesByScorerPolicyVersion = counts(d["samples_by_scorer_policy_version"])
	s.Steps = append([]TrainerStep(nil), r.trainSteps...)
	s.UnusedTrajectories = max(0, s.Trajectories-s.TrainerTrajectories)
	if s.Trajectories > 0 {
		s.UnusedShare = round3(float64(s.UnusedTrajectories) / float64(s.Trajectories))
	}
	if v, ok := d["reload_seconds_p50"].(float64); ok {
		s.ReloadSecondsP50 = &v
	}
	if xs, ok := d["reload_seconds"].([]any); ok {
		for _, x := range xs {
			s.ReloadSeconds = append(s.ReloadSeconds, num(x))
		}
	}
	wall := s.Seconds
	if wall <= 0 {
		return
	}
	// Busy shares of the loop's wall time: sampling is summed over the
	// workers (so it can pass 1 with several), scoring is the processor's CPU.
	s.Shares = map[string]float64{
		"sampling":   round3(r.sampling / wall),
		"scoring":    round3(procCPU / wall),
		"training":   round3(num(d["train_seconds"]) / wall),
		"evaluation": round3(r.evalSeconds / wall),
		"waiting":    round3(s.TrainerWaitShare),
	}
	s.Bound = bound(s.Shares, r.o.Workers)
}
