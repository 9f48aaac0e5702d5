package learn

import (
	"encoding/json"
	"strings"
	"testing"
)

// The trainer's alloc_* fields reach the summary and the report's table:
// per seed the helpful share over its even share, summed over the steps.
func TestAllocationTable(t *testing.T) {
	step := func(n int, line string) TrainerStep {
		var ts TrainerStep
		if err := json.Unmarshal([]byte(line), &ts); err != nil {
			t.Fatal(err)
		}
		ts.Step = n
		return ts
	}
	// seed 1: helpful 0.6 over 0.3 at step 1, 0.3 over 0.3 at step 2: 0.9/0.6 = 1.5 over the run
	// seed 2: 0.4 over 0.4 (1.0); harmful 0.1 over 0.2 on both seeds (0.5)
	s1 := Summary{Method: "attnsr", World: "household-long", Seed: 1, Steps: []TrainerStep{
		step(1, `{"alloc_samples":3,"alloc_helpful_samples":2,"alloc_helpful_p":0.6,"alloc_helpful_even":0.3,"alloc_helpful_top":2,"alloc_helpful_reward":0.1,"alloc_helpful_reward_even":0.05,"alloc_harmful_samples":1,"alloc_harmful_p":0.05,"alloc_harmful_even":0.1}`),
		step(2, `{"alloc_samples":2,"alloc_helpful_samples":1,"alloc_helpful_p":0.3,"alloc_helpful_even":0.3,"alloc_helpful_top":0,"alloc_harmful_samples":1,"alloc_harmful_p":0.05,"alloc_harmful_even":0.1}`),
	}}
	s2 := Summary{Method: "attnsr", World: "household-long", Seed: 2, Steps: []TrainerStep{
		step(1, `{"alloc_samples":1,"alloc_helpful_samples":1,"alloc_helpful_p":0.4,"alloc_helpful_even":0.4,"alloc_helpful_top":0.5,"alloc_harmful_samples":1,"alloc_harmful_p":0.1,"alloc_harmful_even":0.2}`),
	}}
	if a, ok := s1.allocation(0, -1); !ok || a.Samples != 5 || a.HelpfulP < 0.899 || a.HelpfulP > 0.901 {
		t.Fatalf("summed %+v %v", a, ok)
	}
	b, _ := json.Marshal(s1.Steps[0])
	if !strings.Contains(string(b), `"alloc_helpful_p":0.6`) {
		t.Fatalf("the readings are not written back: %s", b)
	}
	c := Comparison{Runs: []Summary{s1, s2, {Method: "ppo", World: "household-long", Seed: 1}}}
	md := c.allocationMarkdown()
	// mean of 1.5 and 1.0 is 1.25 (sd 0.354); first step 2.0 and 1.0; last step 1.0 and 1.0;
	// largest share 2.5 of 4 helpful samples, chance (0.6 + 0.4) / 4; harmful 0.5 on both
	want := "| attnsr | household-long | 2 | 6 | 1.250 ± 0.354 | 1 of 2 | 1.000 | 1.500 | 1.000 | 0.625 (0.250) | 0.500 ± 0.000 | 0 of 2 | 0.500 | +0.0250 (+0.0125) | +0.0000 (+0.0000) |"
	if !strings.Contains(md, want) {
		t.Fatalf("table:\n%s\nwant a row starting %s", md, want)
	}
	if strings.Contains(md, "| ppo |") {
		t.Fatalf("a run without readings got a row:\n%s", md)
	}
	if strings.Contains(md, "by length") {
		t.Fatalf("a length table without length readings:\n%s", md)
	}
	// with the share by length: seed 1 helpful 0.9 over 0.45 (2.0), seed 2 0.4 over 0.5 (0.8)
	s1.Steps[0].HelpfulLen, s1.Steps[1].HelpfulLen = 0.3, 0.15
	s2.Steps[0].HelpfulLen = 0.5
	md = Comparison{Runs: []Summary{s1, s2}}.allocationMarkdown()
	if want := "| attnsr | household-long | 2 | 0.950 | 1.400 ± 0.849 | 1 of 2 | 1.000 | 0.000 | — | 0 of 0 | — |"; !strings.Contains(md, want) {
		t.Fatalf("table:\n%s\nwant a row starting %s", md, want)
	}
	if (Comparison{Runs: []Summary{{Method: "ppo", Seed: 1}}}).allocationMarkdown() != "" {
		t.Fatal("a table without readings")
	}
}
