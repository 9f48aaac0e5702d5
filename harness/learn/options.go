package learn

// The options of a run: what `creditflow learn` sets from its flags, the
// defaults, and the checks a run starts with.

import (
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/vocab"
)

// Methods: GRPO is outcome advantages only (LAPO's advantage with λ = 0);
// PPO is the terminal reward only with the critic of AttnSR's ppo output
// (AttnSR's token rewards with β = 0: no step rewards); Oracle is GRPO plus
// ±λ on the action tokens of the turns the world labelled (the control arm,
// docs/learn.md "The oracle-credit arm").
const (
	MethodLAPO   = string(vocab.LAPO)
	MethodGRPO   = "grpo"
	MethodAttnSR = string(vocab.AttnSR)
	MethodPPO    = "ppo"
	MethodOracle = "oracle"
)

// Rewards the workers can publish (Options.Reward).
const (
	RewardJudge      = "judge"
	RewardLikelihood = "likelihood"
	RewardGoldBonus  = "gold-bonus"
	// RewardLikelihoodBonus is the verdict plus GoldBonus times the gold
	// answer's likelihood: LAPO's two signals added per episode.
	RewardLikelihoodBonus = "likelihood-bonus"
)

// Options configure one run of the loop.
type Options struct {
	Method        string // lapo | grpo | attnsr | ppo | oracle
	World         string // searchqa | widesearch | rumour | household | household-long ("" : household for attnsr and ppo, searchqa otherwise)
	Seed          int
	Workers       int
	Steps         int // trainer steps (policy versions after the start)
	GroupsPerStep int
	GroupSize     int
	// GroupsPerVersion is what each worker produces under one version
	// before it waits for the next (0: its share of GroupsPerStep, so that
	// the workers produce what the trainer consumes).
	GroupsPerVersion int
	MaxPolicyLag     int64
	LR               float64
	// The trainer (docs/learn.md, "The trainer"): optimizer steps per batch,
	// the clip ε of the ratio to the policy before the update, the cap C of
	// the importance weight against the behaviour policy, and for the ppo
	// loss GAE's γ and λ and the critic's learning rate.
	Epochs    int
	Clip      float64
	ISCap     float64
	Gamma     float64
	GAELambda float64
	CriticLR  float64
	// Credit: LAPO's λ (also the oracle arm's ±λ), direction and gate;
	// AttnSR's output (grpo: the reweighted advantages; ppo: token rewards
	// for the critic) and β.
	Lambda       float64
	Direction    string
	NoGate       bool
	AttnSROutput string
	Beta         float64
	EvalEpisodes int
	Partitions   int
	Brokers      []string // empty: the embedded broker
	Topics       stage.Topics
	GroupID      string // the processor's consumer group prefix
	Dir          string // run folder (checkpoints, logs); "" : a temporary one, removed after
	Exe          string // the creditflow binary the processor runs from
	Python       string // "" : FindPython ($CREDITFLOW_PYTHON, else the project's environment)
	Chaos        bool   // SIGKILL the processor and one worker mid-run
	// JudgeNoise is the probability that the outcome reward the workers
	// publish is wrong (a flaky judge; held-out success counts true answers).
	JudgeNoise float64
	// Reward is what the workers publish as the outcome reward: judge (the
	// judge's verdict), likelihood (the gold answer's likelihood given the
	// pre-answer context) or gold-bonus (the verdict plus GoldBonus when the
	// gold string appears in an observation) or likelihood-bonus (the verdict
	// plus GoldBonus times the likelihood); LabelNoise gives the scorer
	// the gold the judge believes, wrong exactly where it errs. The controls
	// of the noisy-judge comparison (docs/learn.md).
	Reward     string
	GoldBonus  float64
	LabelNoise bool
	// OracleSteps gives PPO (--method ppo) the oracle's step rewards: ±Lambda
	// on the last action token of each turn the world labelled, beside the
	// terminal reward (the arm ppo+oracle: the oracle control of AttnSR's
	// PPO setup, docs/learn.md "The oracle-credit arm").
	OracleSteps bool
	// OracleOnce pays each label once: the first key turn, the enabling
	// turn before it, every harmful turn (the oracle arms; a world that
	// labels every walk into the office pays walking in and out).
	OracleOnce bool
	// AttnSRUniform spreads AttnSR's step budget evenly over the moves
	// (ρ = η = 0: no backtracking, no recency, so p is uniform; the budget
	// β·C·(R − R̄) keeps its focus): the control that says whether the
	// attention's allocation carries AttnSR's lead.
	AttnSRUniform bool
	// AttnSRTerminal has the trainer move each sample's step rewards onto
	// its terminal token (the ppo output: the episode is paid R + β·C·(R − R̄)
	// where PPO's reward is): the control that says whether AttnSR's lead
	// needs the step rewards on the moves or only the centred budget.
	AttnSRTerminal bool
	Timeout        time.Duration
	Logger         zerolog.Logger
	// OnEval, when set, sees each version's evaluation as it arrives.
	OnEval func(Eval)
}

// Defaults is a run that shows a clear rise on two cores in minutes.
func Defaults() Options {
	return Options{Method: MethodLAPO, Seed: 1, Workers: 2, Steps: 16, GroupsPerStep: 8, GroupSize: 5,
		MaxPolicyLag: 1, LR: 2e-4, Epochs: 1, Clip: 0.2, ISCap: 2, Gamma: 1, GAELambda: 0.95, CriticLR: 1e-3,
		Lambda: 0.5, Direction: string(vocab.Backward), AttnSROutput: string(vocab.OutputGRPO), Beta: 0.25, Reward: RewardJudge, GoldBonus: 0.5, EvalEpisodes: 128, Partitions: 2, Topics: stage.DefaultTopics(),
		GroupID: "creditflow-learn", Timeout: 20 * time.Minute, Logger: zerolog.Nop()}
}

// resolved is o with the defaults that depend on other options filled in:
// the method's world, and the groups a worker plays under one version.
func (o Options) resolved() Options {
	if o.World == "" {
		o.World = "searchqa"
		if o.Method == MethodAttnSR || o.Method == MethodPPO {
			o.World = "household"
		}
	}
	return o
}

// searchWorld says whether o's world has a gold answer for LAPO's scorer.
func (o Options) searchWorld() bool {
	switch o.resolved().World {
	case "searchqa", "widesearch", "rumour":
		return true
	}
	return false
}

// oracle says whether the run's trainer adds the oracle's term: the oracle
// arm (GRPO plus ±λ) and PPO with the oracle's step rewards.
func (o Options) oracle() bool { return o.Method == MethodOracle || o.OracleSteps }

// labelled says whether the workers write the world's turn labels: for the
// oracle's term, and in AttnSR runs for the trainer's alloc_* readings.
func (o Options) labelled() bool { return o.oracle() || o.Method == MethodAttnSR }

// loss is the trainer's loss: ppo (GAE with a critic over token rewards)
// for AttnSR's ppo output and the PPO method, pg (creditflow's advantages)
// otherwise.
func (o Options) loss() string {
	if o.Method == MethodPPO || (o.Method == MethodAttnSR && o.AttnSROutput == string(vocab.OutputPPO)) {
		return "ppo"
	}
	return "pg"
}

// Validate reports options a run cannot start with, naming the flag of
// `creditflow learn` to change; it looks at the options only.
func (o Options) Validate() error {
	switch o.Method {
	case MethodLAPO, MethodGRPO, MethodAttnSR, MethodPPO, MethodOracle:
	default:
		return fmt.Errorf("--method %q: use lapo, grpo, attnsr, ppo or oracle", o.Method)
	}
	if _, err := vocab.ParseOutput(o.AttnSROutput); err != nil {
		return fmt.Errorf("--attnsr-output %q: use grpo or ppo", o.AttnSROutput)
	}
	if _, err := vocab.ParseDirection(o.Direction); err != nil {
		return fmt.Errorf("--direction %q: use backward or forward", o.Direction)
	}
	if o.Epochs < 1 || !(o.Clip > 0) || !(o.ISCap >= 1) {
		return fmt.Errorf("--epochs must be at least 1, --clip positive and --is-cap at least 1")
	}
	switch o.resolved().World {
	case "searchqa", "widesearch", "rumour", "household", "household-long":
	default:
		return fmt.Errorf("--world %q: use searchqa, widesearch, rumour, household or household-long (docs/learn.md)", o.World)
	}
	if o.Workers < 1 || o.Steps < 1 || o.GroupsPerStep < 1 || o.GroupSize < 2 {
		return fmt.Errorf("--workers, --steps and --groups-per-step must be positive and the group size at least 2")
	}
	if o.JudgeNoise < 0 || o.JudgeNoise >= 0.5 || math.IsNaN(o.JudgeNoise) {
		return fmt.Errorf("--judge-noise %v: want a probability in [0, 0.5) (at 0.5 the reward says nothing)", o.JudgeNoise)
	}
	switch o.Reward {
	case "", RewardJudge:
	case RewardGoldBonus: // every world has a gold string that only its evidence shows (the name, the code)
	case RewardLikelihood, RewardLikelihoodBonus:
		if !o.searchWorld() {
			return fmt.Errorf("--reward %s needs a world with a gold answer for LAPO's scoring template (searchqa, widesearch or rumour), not %s", o.Reward, o.resolved().World)
		}
	default:
		return fmt.Errorf("--reward %q: use judge, likelihood, gold-bonus or likelihood-bonus", o.Reward)
	}
	if o.OracleSteps && o.Method != MethodPPO {
		return fmt.Errorf("--oracle-steps is for --method ppo (with the pg loss the oracle arm is --method oracle)")
	}
	if o.AttnSRUniform && o.Method != MethodAttnSR {
		return fmt.Errorf("--attnsr-uniform is for --method attnsr")
	}
	if o.AttnSRTerminal && (o.Method != MethodAttnSR || o.AttnSROutput != string(vocab.OutputPPO)) {
		return fmt.Errorf("--attnsr-terminal moves the ppo output's step rewards: it is for --method attnsr --attnsr-output ppo")
	}
	if o.OracleOnce && !o.oracle() {
		return fmt.Errorf("--oracle-once is for the oracle arms (--method oracle, or --method ppo --oracle-steps)")
	}
	if o.LabelNoise && (o.Method != MethodLAPO || !o.searchWorld()) {
		return fmt.Errorf("--label-noise is for --method lapo on a world with a gold answer (searchqa, widesearch or rumour)")
	}
	if o.Partitions < 1 {
		return fmt.Errorf("--partitions %d: want at least 1", o.Partitions)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", o.Timeout)
	}
	return nil
}
