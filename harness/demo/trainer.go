package demo

// The demo's trainer side: a consumer that reads the samples and dead
// letters as a trainer would, validates every sample (Check), and counts
// what the summary reports.

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/schemas"
)

// trainer validates and counts what a trainer would read.
type trainer struct {
	o          Options
	mu         sync.Mutex
	seen       map[string]bool
	groups     map[string]int
	groupsDone int
	dups       int
	invalid    int
	dead       map[string]int
	producedAt map[string]time.Time
	groupsIn   int
	latencies  []float64
	tokens     int64
	eligible   int
	pos, neg   int
	gatePass   int
	absProc    float64
	confSum    float64
	attnN      int
	baseline   float64
	stepPos    int
	stepNeg    int
	steps      int
	hits       *hits
	rewardSum  float64
	successes  int
}

// successThreshold is the stages' default --success-threshold.
var successThreshold = stage.DefaultConfig().SuccessThreshold

func newTrainer(o Options) *trainer {
	return &trainer{o: o, seen: map[string]bool{}, groups: map[string]int{}, dead: map[string]int{}, producedAt: map[string]time.Time{}, hits: newHits()}
}

func (t *trainer) addTruth(tr schemas.Trajectory, truth synth.Truth) {
	t.mu.Lock()
	t.hits.add(tr, truth)
	t.mu.Unlock()
}

func (t *trainer) produced(prompt string, at time.Time) {
	t.mu.Lock()
	t.producedAt[prompt] = at
	t.groupsIn++
	t.mu.Unlock()
}

func (t *trainer) groupsOut() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.groupsDone
}

func (t *trainer) complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen) >= t.o.Groups*t.o.GroupSize && sumMap(t.dead) >= t.o.Bad
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (t *trainer) progress(el time.Duration) Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Progress{GroupsIn: t.groupsIn, GroupsOut: t.groupsDone, SamplesOut: len(t.seen), DeadLetters: sumMap(t.dead),
		Expected: t.o.Groups * t.o.GroupSize, Elapsed: el}
}

func (t *trainer) deadLetter(r consumers.Record) {
	reason := "unknown"
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderReason {
			reason = string(h.Value)
		}
	}
	t.mu.Lock()
	t.dead[reason]++
	t.mu.Unlock()
}

// Check validates a sample as a trainer needs it: aligned lengths, a 0/1
// loss mask, finite values, zero advantage outside policy tokens.
func Check(s *schemas.Sample) error {
	n := len(s.Tokens)
	if n == 0 || len(s.LossMask) != n {
		return fmt.Errorf("lengths: tokens %d, mask %d", n, len(s.LossMask))
	}
	switch s.Output {
	case "token_rewards": // PPO: the trainer computes advantages with its critic
		if len(s.TokenRewards) != n || len(s.Advantages) != 0 {
			return fmt.Errorf("ppo sample: token rewards %d, advantages %d for %d tokens", len(s.TokenRewards), len(s.Advantages), n)
		}
	default:
		if len(s.Advantages) != n || s.TokenRewards != nil {
			return fmt.Errorf("advantages %d for %d tokens (token rewards %d)", len(s.Advantages), n, len(s.TokenRewards))
		}
	}
	if s.RolloutLogprobs != nil && len(s.RolloutLogprobs) != n {
		return fmt.Errorf("rollout log-probs %d for %d tokens", len(s.RolloutLogprobs), n)
	}
	policy := 0
	for i := 0; i < n; i++ {
		if s.LossMask[i] > 1 {
			return fmt.Errorf("loss mask %d at %d", s.LossMask[i], i)
		}
		if len(s.Advantages) > 0 {
			a := float64(s.Advantages[i])
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return fmt.Errorf("advantage %v at %d", a, i)
			}
			if s.LossMask[i] == 0 && a != 0 {
				return fmt.Errorf("advantage %v on a non-policy token %d", a, i)
			}
		}
		if s.TokenRewards != nil {
			if r := float64(s.TokenRewards[i]); math.IsNaN(r) || math.IsInf(r, 0) || (s.LossMask[i] == 0 && r != 0) {
				return fmt.Errorf("token reward %v at %d", r, i)
			}
		}
		policy += int(s.LossMask[i])
	}
	if policy == 0 {
		return errors.New("no policy tokens")
	}
	return nil
}

func (t *trainer) sample(r consumers.Record) {
	now := time.Now()
	s, err := schemas.Samples().Decode(r.Value)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.invalid++
		t.o.Logger.Error().Err(err).Msg("trainer: undecodable sample")
		return
	}
	if err := Check(s); err != nil {
		t.invalid++
		t.seen[s.TrajectoryID] = true // seen, but unusable: reported as invalid, not lost
		t.o.Logger.Error().Err(err).Str("trajectory_id", s.TrajectoryID).Msg("trainer: invalid sample")
		return
	}
	if t.seen[s.TrajectoryID] {
		t.dups++
		return
	}
	t.seen[s.TrajectoryID] = true
	t.rewardSum += s.Reward
	if s.Reward >= successThreshold {
		t.successes++
	}
	t.hits.observe(s)
	t.tokens += int64(len(s.Tokens))
	t.groups[s.PromptID]++
	if t.groups[s.PromptID] == int(s.GroupSize) || (s.Partial && t.groups[s.PromptID] == 1) {
		t.groupsDone++
	}
	if at, ok := t.producedAt[s.PromptID]; ok {
		t.latencies = append(t.latencies, float64(now.Sub(at).Microseconds())/1000)
	}
	for _, d := range s.Turns {
		if d.Eligible && d.Delta != nil {
			t.eligible++
			if *d.Delta > 0 {
				t.pos++
			} else if *d.Delta < 0 {
				t.neg++
			}
			t.gatePass += int(d.Gate)
			t.absProc += math.Abs(d.ProcessAdvantage)
		}
		if d.StepReward != nil {
			t.steps++
			if *d.StepReward > 0 {
				t.stepPos++
			} else if *d.StepReward < 0 {
				t.stepNeg++
			}
		}
	}
	if s.AttnSR != nil {
		t.attnN++
		t.confSum += s.AttnSR.Confidence
		t.baseline += s.AttnSR.Baseline
	}
}

func share(a, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a) / float64(n)
}

func (t *trainer) summary(el time.Duration, interrupted bool) Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	expected := t.o.Groups * t.o.GroupSize
	produced := t.groupsIn * t.o.GroupSize
	s := Summary{
		Method: t.o.Method, GroupsIn: t.groupsIn, GroupsOut: t.groupsDone, Trajectories: produced,
		SamplesOut: len(t.seen), Duplicates: t.dups, DeadLetters: sumMap(t.dead), DeadByReason: t.dead, InjectedBad: t.o.Bad,
		Lost: expected - len(t.seen), Invalid: t.invalid, Seconds: round(el.Seconds(), 3),
	}
	if interrupted && s.Lost > 0 {
		// Stopped by the user: what did not arrive is not lost (it is on the
		// trajectories topic, or was never produced).
		s.Interrupted, s.Lost = true, 0
		s.Pending, s.NotProduced = max(0, produced-len(t.seen)), expected-produced
	}
	if good := len(t.seen) - t.invalid; good > 0 {
		s.RewardMean = round(t.rewardSum/float64(good), 4)
		s.SuccessRate = round(float64(t.successes)/float64(good), 4)
	}
	s.TrajPerSecond = round(float64(len(t.seen))/el.Seconds(), 2)
	s.TokensPerSec = round(float64(t.tokens)/el.Seconds(), 0)
	if len(t.latencies) > 0 {
		l := append([]float64(nil), t.latencies...)
		sort.Float64s(l)
		s.LatencyP50Ms = round(l[len(l)/2], 1)
		s.LatencyP99Ms = round(l[min(len(l)-1, len(l)*99/100)], 1)
	}
	s.EligibleTurns = t.eligible
	s.PositiveDelta = round(share(t.pos, t.eligible), 4)
	s.NegativeDelta = round(share(t.neg, t.eligible), 4)
	s.GatePassRate = round(share(t.gatePass, t.eligible), 4)
	if t.eligible > 0 {
		s.MeanAbsProcAdv = round(t.absProc/float64(t.eligible), 4)
	}
	if t.attnN > 0 {
		s.MeanConfidence = round(t.confSum/float64(t.attnN), 4)
		s.EMABaseline = round(t.baseline/float64(t.attnN), 4)
	}
	s.PositiveStep = round(share(t.stepPos, t.steps), 4)
	s.NegativeStep = round(share(t.stepNeg, t.steps), 4)
	return s
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
