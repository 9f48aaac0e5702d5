package offline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
)

// TestDirectionLabel: a line's "direction" (the label of an entropy or kl
// Δ) must agree with WithDirection; lines without one, and runs without
// the option, are not checked.
func TestDirectionLabel(t *testing.T) {
	line := func(id, dir string) string {
		d := ""
		if dir != "" {
			d = `,"direction":"` + dir + `"`
		}
		return `{"trajectory_id":"` + id + `","prompt_id":"p","group_size":2,"reward":1` + d +
			`,"turns":[{"kind":"search","action_tokens":2,"observation_tokens":3,"delta":0.25},{"kind":"answer","action_tokens":1}]}` + "\n"
	}
	in := line("a", "backward:entropy") + line("b", "")
	if recs, _ := run(t, in, credit.DefaultConfig(), WithDirection("backward:entropy")); len(recs) != 2 {
		t.Fatalf("%d outputs, want 2", len(recs))
	}
	if recs, _ := run(t, in, credit.DefaultConfig()); len(recs) != 2 {
		t.Fatalf("without WithDirection: %d outputs, want 2", len(recs))
	}
	var out, diag bytes.Buffer
	err := Compute(strings.NewReader(in), &out, &diag, credit.DefaultConfig(), WithDirection("backward"))
	if err == nil || !strings.Contains(err.Error(), `line 1`) || !strings.Contains(err.Error(), "--lapo-statistic") {
		t.Fatalf("a backward:entropy line in a logprob run: %v", err)
	}
}
