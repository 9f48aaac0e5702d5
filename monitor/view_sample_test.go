package monitor

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/schemas"
)

// TestSampleViewAttnSRFields: an AttnSR sample's diagnostics are answered
// under the documented lower-case names the page reads (attnsr.confidence,
// …, attnsr.budget), and a LAPO sample's as null.
func TestSampleViewAttnSRFields(t *testing.T) {
	s := &schemas.Sample{TrajectoryID: "q1-0", PromptID: "q1", GroupSize: 1, Method: "attnsr", Output: "advantages",
		Tokens: []int32{1, 2}, LossMask: []uint8{0, 1}, Advantages: []float32{0, 1},
		AttnSR: &schemas.AttnSRDiag{Confidence: 0.5, Focus: 0.25, Consensus: 0.75, Baseline: 0.398, Budget: 0.15}}
	b, err := json.Marshal(NewSampleView("t", s, 0, 0, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		AttnSR map[string]float64 `json:"attnsr"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"confidence": 0.5, "focus": 0.25, "consensus": 0.75, "baseline": 0.398, "budget": 0.15}
	if !reflect.DeepEqual(got.AttnSR, want) {
		t.Fatalf("attnsr %v, want %v", got.AttnSR, want)
	}
	s.AttnSR, s.Method = nil, "lapo"
	b, _ = json.Marshal(NewSampleView("t", s, 0, 0, 0, nil))
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	if string(raw["attnsr"]) != "null" {
		t.Fatalf("a LAPO sample's attnsr: %s", raw["attnsr"])
	}
}
