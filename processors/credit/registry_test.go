package credit

import (
	"reflect"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	if got := Methods()[:2]; !reflect.DeepEqual(got, []string{string(MethodLAPO), string(MethodAttnSR)}) {
		t.Fatalf("built-in methods %v, want lapo then attnsr", got)
	}
	for name, scoring := range map[string]Scoring{string(MethodLAPO): ScoreRows, string(MethodAttnSR): ScoreAttention} {
		m, ok := Lookup(name)
		if !ok || m.Scoring != scoring || m.Baseline != (name == string(MethodAttnSR)) {
			t.Fatalf("%s: %+v, %v", name, m, ok)
		}
	}
	cfg := DefaultConfig()
	cfg.Method = "outcome-only-test"
	if _, ok := Lookup(cfg.Method); !ok { // (registered by an earlier run with -count)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"outcome-only-test" is unknown; use "lapo" or "attnsr"`) {
			t.Fatalf("unregistered method: %v", err)
		}
		// An outcome-only method: every turn gets A_out.
		Register(cfg.Method, Method{Group: func(_ []Member, results []Result, _ Config, _ *EMA) {
			for i := range results {
				for t := range results[i].Turns {
					results[i].Turns[t].Advantage = results[i].OutcomeAdvantage
				}
			}
		}})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r0, r1 := 1.0, 0.0
	turns := []Turn{{Kind: KindSearch, ActionTokens: 2, ObservationTokens: 1}, {Kind: KindAnswer, ActionTokens: 1}}
	res, err := ComputeGroup([]Member{
		{TrajectoryID: "t1", PromptID: "p", GroupSize: 2, Reward: &r1, Turns: turns},
		{TrajectoryID: "t0", PromptID: "p", GroupSize: 2, Reward: &r0, Turns: turns},
	}, false, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Rewards 0 and 1: mean 0.5, std 0.5, A_out = ±0.5/(0.5 + ε_R).
	a := 0.5 / (0.5 + cfg.EpsR)
	for i, want := range []float64{-a, a} {
		for _, tr := range res[i].Turns {
			if tr.Advantage != want {
				t.Fatalf("%s: turn advantage %v, want %v", res[i].TrajectoryID, tr.Advantage, want)
			}
		}
	}
	adv, mask, rewards := TokenArrays(Member{PromptTokens: 1, Turns: turns}, res[1], cfg)
	if rewards != nil || !reflect.DeepEqual(mask, []uint8{0, 1, 1, 0, 1}) || adv[1] != a || adv[3] != 0 || adv[4] != a {
		t.Fatalf("token arrays %v %v %v", adv, mask, rewards)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second Register of the same name did not panic")
		}
	}()
	Register(MethodLAPO, Method{Group: lapoGroup})
}
