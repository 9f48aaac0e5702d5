package python_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/creditflow/creditflow/schemas"
)

func ptr[T any](v T) *T { return &v }

// TestPackageBytesEqualGo: the package encodes a trajectory to the bytes the Go codec
// writes (with the writer generation the Go codec uses), the Go codec decodes what the
// package writes by default, and the package decodes a Go-written Sample to the same values.
func TestPackageBytesEqualGo(t *testing.T) {
	py := projectPython(t)
	tr := &schemas.Trajectory{
		TrajectoryID: "t-ü", PromptID: "p-1", GroupSize: 5, SampleIndex: 2, PolicyVersion: 7, CreatedAtMs: 1764500000000,
		Prompt: []int32{101, 102, 103}, Turns: []schemas.Turn{
			{Kind: "search", Action: []int32{11, 12}, Observation: []int32{21, 22, 151935}},
			{Kind: "answer", Action: []int32{31}}},
		Reward: ptr(0.25), PredAnswer: ptr("Paris"), GoldAnswers: []string{"Paris", "City of Paris"},
		GoldTarget: []int32{40, 41, 42}, GoldSpan: [2]int32{1, 3},
		RolloutLogprobs: []float32{-0.5, -0.25, -1.5}, Temperature: ptr(float32(0.7)),
	}
	goBytes, err := schemas.Trajectories().Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{
		"trajectory_id": tr.TrajectoryID, "prompt_id": tr.PromptID, "group_size": tr.GroupSize,
		"sample_index": tr.SampleIndex, "policy_version": tr.PolicyVersion, "created_at_ms": tr.CreatedAtMs,
		"prompt": tr.Prompt, "turns": []map[string]any{
			{"kind": "search", "action": tr.Turns[0].Action, "observation": tr.Turns[0].Observation},
			{"kind": "answer", "action": tr.Turns[1].Action}},
		"reward": *tr.Reward, "pred_answer": *tr.PredAnswer, "gold_answers": tr.GoldAnswers,
		"gold_target": tr.GoldTarget, "gold_span": tr.GoldSpan, "rollout_logprobs": tr.RolloutLogprobs,
		"temperature": *tr.Temperature,
	})
	dir := t.TempDir()
	inPath := filepath.Join(dir, "t.json")
	if err := os.WriteFile(inPath, in, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &schemas.Sample{
		TrajectoryID: "t-1", PromptID: "p-1", GroupSize: 2, SampleIndex: 1, PolicyVersion: 3, CreatedAtMs: 5,
		Method: "lapo", Output: "advantages", Reward: 1, OutcomeAdvantage: 0.5,
		Tokens: []int32{1, 2, 3, 4}, LossMask: []uint8{0, 1, 1, 0}, Advantages: []float32{0, 0.5, -0.25, 0},
		RolloutLogprobs: []float32{0, -1, -2, 0},
		Turns:           []schemas.TurnDiag{{Kind: "answer", Advantage: 0.5}},
	}
	sb, err := schemas.Samples().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	samplePath := filepath.Join(dir, "s.bin")
	if err := os.WriteFile(samplePath, sb, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `import json, sys, creditflow
from creditflow import wire
d = json.load(open(sys.argv[1]))
goheader = bytes.fromhex(sys.argv[2])
gen = wire.LEGACY if goheader == wire.codec("Trajectory").writers[wire.LEGACY].fingerprint else wire.CURRENT
s = creditflow.decode_sample(open(sys.argv[3], "rb").read())
print(json.dumps({"forced": creditflow.encode_trajectory(d, gen).hex(), "auto": creditflow.encode_trajectory(d).hex(),
  "sample": {"tokens": s["tokens"].tolist(), "loss_mask": s["loss_mask"].tolist(), "advantages": s["advantages"].tolist(),
             "rollout_logprobs": s["rollout_logprobs"].tolist(), "token_rewards": s["token_rewards"],
             "turns": s["turns"], "policy_version": s["policy_version"], "scorer_policy_version": s["scorer_policy_version"]}}))`
	out := runPy(t, py, 60*time.Second, "-c", script, inPath, hex.EncodeToString(goBytes[2:10]), samplePath)
	var res struct {
		Forced, Auto string
		Sample       struct {
			Tokens          []int32   `json:"tokens"`
			LossMask        []uint8   `json:"loss_mask"`
			Advantages      []float32 `json:"advantages"`
			RolloutLogprobs []float32 `json:"rollout_logprobs"`
			TokenRewards    []float32 `json:"token_rewards"`
			Turns           []struct {
				Kind      string  `json:"kind"`
				Advantage float64 `json:"advantage"`
			} `json:"turns"`
			PolicyVersion int64 `json:"policy_version"`
		} `json:"sample"`
	}
	if err := json.Unmarshal(lastLine(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Forced != hex.EncodeToString(goBytes) {
		t.Fatalf("package and Go bytes differ:\npy %s\ngo %x", res.Forced, goBytes)
	}
	auto, _ := hex.DecodeString(res.Auto)
	back, err := schemas.Trajectories().Decode(auto)
	if err != nil {
		t.Fatalf("Go cannot decode the package's default encoding: %v", err)
	}
	if !reflect.DeepEqual(back, tr) {
		t.Fatalf("Go decoded the package's trajectory to\n%+v\nwant\n%+v", back, tr)
	}
	got := res.Sample
	if !reflect.DeepEqual(got.Tokens, s.Tokens) || !reflect.DeepEqual(got.LossMask, s.LossMask) ||
		!reflect.DeepEqual(got.Advantages, s.Advantages) || !reflect.DeepEqual(got.RolloutLogprobs, s.RolloutLogprobs) ||
		got.TokenRewards != nil || got.PolicyVersion != 3 || len(got.Turns) != 1 || got.Turns[0].Advantage != 0.5 {
		t.Fatalf("package decoded the Go sample to %+v", got)
	}
}
