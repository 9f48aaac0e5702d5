package credit

import (
	"fmt"
	"strings"
	"sync"
)

// A credit method is what the score stage asks the scorer for a trajectory
// and how a group of scored trajectories becomes advantages. Methods are
// registered by name; the score stage, the advantage stage, `creditflow
// compute` and Config.Validate look the configured name up here and
// nothing else dispatches on it. LAPO and AttnSR are registered below; a
// new method is one file with one Register call (docs/method.md, "Adding a
// credit method").

// Scoring is what the score stage asks the scorer for, per trajectory.
type Scoring int

const (
	// ScoreNothing: the method reads only the outcome (reward or answer);
	// the scored record carries no turn scores and no graphs.
	ScoreNothing Scoring = iota
	// ScoreRows: one scorer row set per trajectory, turned into a gain Δ
	// per eligible turn (docs/method.md §2.1, §2.4), as LAPO does.
	ScoreRows
	// ScoreAttention: the step graphs of the configured layers
	// (docs/method.md §3.1), as AttnSR does.
	ScoreAttention
)

// Method is one credit method.
type Method struct {
	// Scoring is what the score stage asks the scorer for.
	Scoring Scoring
	// Baseline is true when Group updates the partition's EMA baseline:
	// exactly once per group, the group being one batch (docs/method.md
	// §3.3). The advantage stage exports the baseline and the partition
	// snapshot carries it.
	Baseline bool
	// Validate checks what the method needs of a member beyond
	// ValidateMember's common checks (ids, turns, reward); nil: nothing.
	Validate func(m Member, cfg Config) error
	// Group fills in the results of a group whose members are valid and in
	// canonical order (ascending trajectory_id): each result arrives with
	// its ids, Partial, Reward (R_i), OutcomeAdvantage (A_out_i, §1) and
	// one zero TurnResult per turn. Every turn's Advantage is what its
	// assistant tokens get. ema is the partition's baseline, not nil when
	// Baseline is set. It must be deterministic (docs/method.md, "Adding a
	// credit method").
	Group func(members []Member, results []Result, cfg Config, ema *EMA)
	// TokenRewards, when set and true under cfg, makes a sample carry
	// token rewards (R_i and the step rewards placed on assistant tokens,
	// see TokenArrays) instead of token advantages.
	TokenRewards func(cfg Config) bool
}

var registry = struct {
	sync.RWMutex
	methods map[string]Method
	names   []string // in registration order
}{methods: map[string]Method{}}

// Register makes a method available under name. It panics on an empty
// name, a method without Group, or a name already registered: both are
// programming errors found at start-up.
func Register[N ~string](name N, m Method) {
	n := string(name)
	if n == "" || m.Group == nil {
		panic("credit: Register needs a name and a Group function")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.methods[n]; dup {
		panic(fmt.Sprintf("credit: method %q registered twice", n))
	}
	registry.methods[n] = m
	registry.names = append(registry.names, n)
}

// Lookup returns the method registered under name.
func Lookup[N ~string](name N) (Method, bool) {
	registry.RLock()
	defer registry.RUnlock()
	m, ok := registry.methods[string(name)]
	return m, ok
}

// Methods lists the registered method names in registration order (LAPO
// and AttnSR first).
func Methods() []string {
	registry.RLock()
	defer registry.RUnlock()
	return append([]string(nil), registry.names...)
}

// checkMethod is Config.Validate's method check.
func checkMethod[N ~string](name N) error {
	if _, ok := Lookup(name); ok {
		return nil
	}
	names := Methods()
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	use := quoted[len(quoted)-1]
	if len(quoted) > 1 {
		use = strings.Join(quoted[:len(quoted)-1], ", ") + " or " + use
	}
	return fmt.Errorf("credit: method %q is unknown; use %s", string(name), use)
}

func init() {
	Register(MethodLAPO, Method{Scoring: ScoreRows, Group: lapoGroup})
	Register(MethodAttnSR, Method{Scoring: ScoreAttention, Baseline: true, Validate: validateAttention, Group: attnsrGroup,
		TokenRewards: func(cfg Config) bool { return cfg.Output == OutputPPO }})
}
