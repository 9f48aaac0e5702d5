package schemas

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestValidateTrajectoryValid(t *testing.T) {
	lim := DefaultLimits()
	if err := ValidateTrajectory(sampleTrajectory(), lim); err != nil {
		t.Fatalf("valid trajectory rejected: %v", err)
	}
	// No reward but gold answers: valid (reward comes from F1).
	tr := sampleTrajectory()
	tr.Reward = nil
	if err := ValidateTrajectory(tr, lim); err != nil {
		t.Fatalf("reward from gold answers rejected: %v", err)
	}
	// No gold target, zero span: valid.
	tr = sampleTrajectory()
	tr.GoldTarget, tr.GoldSpan = nil, [2]int32{}
	if err := ValidateTrajectory(tr, lim); err != nil {
		t.Fatalf("trajectory without gold target rejected: %v", err)
	}
	// A configured extra eligible kind is known.
	tr = sampleTrajectory()
	tr.Turns[0].Kind = "browse"
	lim2 := lim
	lim2.EligibleKinds = []string{KindSearch, "browse"}
	if err := ValidateTrajectory(tr, lim2); err != nil {
		t.Fatalf("configured kind rejected: %v", err)
	}
	if !lim2.Eligible("browse") || lim2.Eligible(KindAnswer) {
		t.Fatal("Eligible disagrees with EligibleKinds")
	}
	// Boundaries that are still valid.
	tr = sampleTrajectory()
	tr.GoldSpan = [2]int32{0, 4}
	tr.Prompt[0] = DefaultVocabSize - 1
	if err := ValidateTrajectory(tr, lim); err != nil {
		t.Fatalf("boundary values rejected: %v", err)
	}
	// Exactly MaxTokens is allowed, one more is not.
	tr = sampleTrajectory()
	lim3 := lim
	lim3.MaxTokens = 3 + 2 + 3 + 1
	if err := ValidateTrajectory(tr, lim3); err != nil {
		t.Fatalf("trajectory at the token limit rejected: %v", err)
	}
	lim3.MaxTokens--
	if ReasonOf(ValidateTrajectory(tr, lim3)) != ReasonTooManyTokens {
		t.Fatal("trajectory over the token limit accepted")
	}
}

func TestValidateTrajectoryReasons(t *testing.T) {
	cases := []struct {
		name   string
		reason string
		mutate func(*Trajectory)
	}{
		{"empty trajectory id", ReasonInvalid, func(t *Trajectory) { t.TrajectoryID = "" }},
		{"huge trajectory id", ReasonInvalid, func(t *Trajectory) { t.TrajectoryID = strings.Repeat("x", 2000) }},
		{"non-UTF-8 prompt id", ReasonInvalid, func(t *Trajectory) { t.PromptID = "p\xff" }},
		{"empty prompt id", ReasonInvalid, func(t *Trajectory) { t.PromptID = "" }},
		{"group size 0", ReasonInvalid, func(t *Trajectory) { t.GroupSize = 0 }},
		{"negative sample index", ReasonInvalid, func(t *Trajectory) { t.SampleIndex = -1 }},
		{"negative policy version", ReasonInvalid, func(t *Trajectory) { t.PolicyVersion = -1 }},
		{"empty prompt", ReasonInvalid, func(t *Trajectory) { t.Prompt = nil }},
		{"no turns", ReasonInvalid, func(t *Trajectory) { t.Turns = nil }},
		{"unknown kind", ReasonInvalid, func(t *Trajectory) { t.Turns[0].Kind = "dance" }},
		{"empty action", ReasonInvalid, func(t *Trajectory) { t.Turns[1].Action = nil }},
		{"too many turns", ReasonTooManyTurns, func(t *Trajectory) {
			for len(t.Turns) <= DefaultMaxTurns {
				t.Turns = append(t.Turns, Turn{Kind: KindOther, Action: []int32{1}})
			}
			t.RolloutLogprobs = nil
		}},
		{"too many tokens", ReasonTooManyTokens, func(t *Trajectory) { t.Turns[0].Observation = make([]int32, DefaultMaxTokens) }},
		{"gold target too long", ReasonTooManyTokens, func(t *Trajectory) { t.GoldTarget = make([]int32, DefaultMaxTokens+1) }},
		{"prompt token = vocab", ReasonTokenOutOfRange, func(t *Trajectory) { t.Prompt[1] = DefaultVocabSize }},
		{"negative action token", ReasonTokenOutOfRange, func(t *Trajectory) { t.Turns[0].Action[0] = -1 }},
		{"observation token too big", ReasonTokenOutOfRange, func(t *Trajectory) { t.Turns[0].Observation[2] = math.MaxInt32 }},
		{"gold target token too big", ReasonTokenOutOfRange, func(t *Trajectory) { t.GoldTarget[0] = DefaultVocabSize + 5 }},
		{"span empty", ReasonBadSpan, func(t *Trajectory) { t.GoldSpan = [2]int32{2, 2} }},
		{"span reversed", ReasonBadSpan, func(t *Trajectory) { t.GoldSpan = [2]int32{3, 1} }},
		{"span past end", ReasonBadSpan, func(t *Trajectory) { t.GoldSpan = [2]int32{1, 5} }},
		{"span negative", ReasonBadSpan, func(t *Trajectory) { t.GoldSpan = [2]int32{-1, 2} }},
		{"span without target", ReasonBadSpan, func(t *Trajectory) { t.GoldTarget = nil }},
		{"NaN reward", ReasonNonFiniteReward, func(t *Trajectory) { t.Reward = ptr(math.NaN()) }},
		{"+Inf reward", ReasonNonFiniteReward, func(t *Trajectory) { t.Reward = ptr(math.Inf(1)) }},
		{"no reward no gold", ReasonMissingReward, func(t *Trajectory) { t.Reward, t.GoldAnswers = nil, nil }},
		{"logprobs too short", ReasonInvalid, func(t *Trajectory) { t.RolloutLogprobs = t.RolloutLogprobs[:2] }},
		{"logprobs too long", ReasonInvalid, func(t *Trajectory) { t.RolloutLogprobs = append(t.RolloutLogprobs, -1) }},
		{"logprob NaN", ReasonInvalid, func(t *Trajectory) { t.RolloutLogprobs[1] = float32(math.NaN()) }},
		{"temperature zero", ReasonInvalid, func(t *Trajectory) { t.Temperature = ptr(float32(0)) }},
		{"temperature inf", ReasonInvalid, func(t *Trajectory) { t.Temperature = ptr(float32(math.Inf(1))) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := sampleTrajectory()
			c.mutate(tr)
			err := ValidateTrajectory(tr, DefaultLimits())
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want *InvalidError %s", err, c.reason)
			}
			if ie.Reason != c.reason {
				t.Fatalf("reason %q (%s), want %q", ie.Reason, ie.Detail, c.reason)
			}
			if ie.Detail == "" {
				t.Fatal("empty detail")
			}
		})
	}
	if ReasonOf(ValidateTrajectory(nil, DefaultLimits())) != ReasonInvalid {
		t.Fatal("nil trajectory accepted")
	}
}

func TestValidateVocabUnchecked(t *testing.T) {
	tr := sampleTrajectory()
	tr.Prompt[0] = math.MaxInt32
	lim := DefaultLimits()
	lim.VocabSize = 0
	if err := ValidateTrajectory(tr, lim); err != nil {
		t.Fatalf("VocabSize 0 should only check non-negativity: %v", err)
	}
	tr.Prompt[0] = -3
	if ReasonOf(ValidateTrajectory(tr, lim)) != ReasonTokenOutOfRange {
		t.Fatal("negative id accepted")
	}
}

func TestValidateSize(t *testing.T) {
	lim := DefaultLimits()
	if ValidateSize(lim.MaxRecordBytes, lim) != nil {
		t.Fatal("record at the limit rejected")
	}
	if ReasonOf(ValidateSize(lim.MaxRecordBytes+1, lim)) != ReasonTooLarge {
		t.Fatal("record over the limit accepted")
	}
}

func TestValidateScored(t *testing.T) {
	lim := DefaultLimits()
	if err := ValidateScored(sampleScored(), lim); err != nil {
		t.Fatalf("valid scored rejected: %v", err)
	}
	att := sampleScored()
	att.Method, att.Direction, att.Turns = MethodAttnSR, "", nil
	if err := ValidateScored(att, lim); err != nil {
		t.Fatalf("valid attnsr scored rejected: %v", err)
	}
	cases := []struct {
		name   string
		reason string
		mutate func(*Scored)
	}{
		{"bad trajectory", ReasonBadSpan, func(s *Scored) { s.Trajectory.GoldSpan = [2]int32{0, 9} }},
		{"unknown method", ReasonInvalid, func(s *Scored) { s.Method = "ppo" }},
		{"lapo no direction", ReasonInvalid, func(s *Scored) { s.Direction = "" }},
		{"turn scores misaligned", ReasonInvalid, func(s *Scored) { s.Turns = s.Turns[:1] }},
		{"NaN delta", ReasonInvalid, func(s *Scored) { s.Turns[0].Delta = ptr(math.NaN()) }},
		{"Inf without", ReasonInvalid, func(s *Scored) { s.Turns[0].Without = ptr(math.Inf(-1)) }},
		{"K mismatch", ReasonInvalid, func(s *Scored) { s.Attention[0].K = 3 }},
		{"AA wrong size", ReasonInvalid, func(s *Scored) { s.Attention[1].AA = s.Attention[1].AA[:3] }},
		{"AO NaN", ReasonInvalid, func(s *Scored) { s.Attention[0].AO[2] = math.NaN() }},
		{"AA above 1", ReasonInvalid, func(s *Scored) { s.Attention[0].AA[2] = 1.5 }},
		{"AA negative", ReasonInvalid, func(s *Scored) { s.Attention[0].AA[2] = -0.1 }},
		{"duplicate layer", ReasonInvalid, func(s *Scored) { s.Attention[1].Layer = s.Attention[0].Layer }},
		{"negative truncations", ReasonInvalid, func(s *Scored) { s.Truncations = -1 }},
		{"attnsr without graphs", ReasonInvalid, func(s *Scored) { s.Method, s.Direction, s.Attention = MethodAttnSR, "", nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sampleScored()
			c.mutate(s)
			if r := ReasonOf(ValidateScored(s, lim)); r != c.reason {
				t.Fatalf("reason %q, want %q", r, c.reason)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	if ReasonOf(nil) != "" || DetailOf(nil) != "" {
		t.Fatal("nil error has a reason")
	}
	wrapped := errors.Join(errors.New("ctx"), &DecodeError{Reason: ReasonUnknownSchema, Detail: "d"})
	if ReasonOf(wrapped) != ReasonUnknownSchema || DetailOf(wrapped) != "d" {
		t.Fatal("ReasonOf does not see a wrapped DecodeError")
	}
	if ReasonOf(errors.New("x")) != ReasonInvalid {
		t.Fatal("plain error should map to invalid")
	}
}

func TestDirectionLabels(t *testing.T) {
	for _, c := range []struct{ dir, stat, label string }{
		{"backward", "logprob", "backward"}, {"forward", "", "forward"},
		{"backward", "entropy", "backward:entropy"}, {"forward", "kl", "forward:kl"},
	} {
		if got := DirectionLabel(c.dir, c.stat); got != c.label {
			t.Errorf("DirectionLabel(%q, %q) = %q, want %q", c.dir, c.stat, got, c.label)
		}
		d, s, ok := SplitDirection(c.label)
		if want := c.stat; !ok || d != c.dir || (s != want && !(want == "" && s == "logprob")) {
			t.Errorf("SplitDirection(%q) = %q %q %v", c.label, d, s, ok)
		}
	}
	for _, bad := range []string{"", "sideways", "backward:logprob", "backward:", "backward:variance", ":kl"} {
		if _, _, ok := SplitDirection(bad); ok {
			t.Errorf("SplitDirection(%q) accepted", bad)
		}
	}
}

// TestIDsInRangeMatchesNaive checks the branch-free id check against a
// test of each id in turn: random arrays of every length up to 9 (the
// unrolled loop's tail) and longer, with an out-of-range id at a random
// place or none, against vocabularies at and around their edges.
func TestIDsInRangeMatchesNaive(t *testing.T) {
	naive := func(ids []int32, vocab int) bool {
		for _, x := range ids {
			if x < 0 || (vocab > 0 && int(x) >= vocab) {
				return false
			}
		}
		return true
	}
	r := rand.New(rand.NewPCG(3, 4))
	vocabs := []int{0, -1, 1, 2, 151_936, math.MaxInt32, math.MaxInt32 + 1}
	for k := 0; k < 20_000; k++ {
		n := r.IntN(10)
		if k%4 == 0 {
			n = r.IntN(300)
		}
		vocab := vocabs[r.IntN(len(vocabs))]
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = r.Int32N(200_000)
		}
		if n > 0 && r.IntN(2) == 0 {
			ids[r.IntN(n)] = []int32{-1, math.MinInt32, int32(max(vocab, 0) % (math.MaxInt32 + 1)), math.MaxInt32}[r.IntN(4)]
		}
		if got, want := idsInRange(ids, vocab), naive(ids, vocab); got != want {
			t.Fatalf("ids %v, vocab %d: idsInRange %v, naive %v", ids, vocab, got, want)
		}
	}
}

// TestAllFiniteMatchesNaive checks the exponent-bit test against
// math.IsNaN and math.IsInf on random arrays of every short length, with a
// NaN, an infinity, the largest finite value or a subnormal at a random
// place or nothing special.
func TestAllFiniteMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0}
	for k := 0; k < 20_000; k++ {
		v := make([]float32, r.IntN(12))
		for i := range v {
			v[i] = float32(r.NormFloat64() * 10)
		}
		if len(v) > 0 && r.IntN(2) == 0 {
			v[r.IntN(len(v))] = specials[r.IntN(len(specials))]
		}
		want := true
		for _, x := range v {
			want = want && !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
		}
		if got := allFinite(v); got != want {
			t.Fatalf("%v: allFinite %v, want %v", v, got, want)
		}
	}
}
