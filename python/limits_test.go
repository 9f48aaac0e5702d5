package python_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

// TestLimitsMatchGo: the package's default Limits are the processor's
// (schemas.DefaultLimits), so a trajectory build_trajectory accepts is one
// the stages accept, and the other way round.
func TestLimitsMatchGo(t *testing.T) {
	py := projectPython(t)
	out := runPy(t, py, 60*time.Second, "-c", `import dataclasses, json, creditflow
print(json.dumps(dataclasses.asdict(creditflow.Limits())))`)
	var got struct {
		VocabSize      int      `json:"vocab_size"`
		MaxTurns       int      `json:"max_turns"`
		MaxTokens      int      `json:"max_tokens"`
		MaxRecordBytes int      `json:"max_record_bytes"`
		EligibleKinds  []string `json:"eligible_kinds"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := schemas.DefaultLimits()
	g := schemas.Limits{VocabSize: got.VocabSize, MaxTurns: got.MaxTurns, MaxTokens: got.MaxTokens,
		MaxRecordBytes: got.MaxRecordBytes, EligibleKinds: got.EligibleKinds}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("Python Limits() = %+v, Go schemas.DefaultLimits() = %+v", g, want)
	}
}
