package schemas

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// pythonWithAvro is the project's Python environment (internal/pyenv), which
// holds the avro package (Apache Avro's Python implementation) the example
// scripts use.
func pythonWithAvro(t *testing.T) string {
	t.Helper()
	return pyenvtest.Python(t)
}

func examplesDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "examples", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func runPython(t *testing.T, py string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(py, args...)
	cmd.Dir = examplesDir(t)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", py, args, err, stderr.String())
	}
	return out
}

// trajectoryJSON is the dict produce_trajectory.encode_trajectory takes.
func trajectoryJSON(tr *Trajectory) []byte {
	turns := make([]map[string]any, len(tr.Turns))
	for i, tu := range tr.Turns {
		turns[i] = map[string]any{"kind": tu.Kind, "action": tu.Action, "observation": tu.Observation}
	}
	d := map[string]any{
		"trajectory_id": tr.TrajectoryID, "prompt_id": tr.PromptID, "group_size": tr.GroupSize,
		"sample_index": tr.SampleIndex, "policy_version": tr.PolicyVersion, "created_at_ms": tr.CreatedAtMs,
		"prompt": tr.Prompt, "turns": turns, "reward": tr.Reward, "pred_answer": tr.PredAnswer,
		"gold_answers": tr.GoldAnswers, "gold_target": tr.GoldTarget, "gold_span": tr.GoldSpan,
		"rollout_logprobs": tr.RolloutLogprobs, "temperature": tr.Temperature, "source": tr.Source,
	}
	b, _ := json.Marshal(d)
	return b
}

func TestPythonProducerInterop(t *testing.T) {
	py := pythonWithAvro(t)

	// The script's built-in example decodes and validates.
	out := runPython(t, py, nil, "produce_trajectory.py")
	tr, err := Trajectories().Decode(out)
	if err != nil {
		t.Fatalf("decode Python example: %v", err)
	}
	if err := ValidateTrajectory(tr, DefaultLimits()); err != nil {
		t.Fatalf("Python example is invalid: %v", err)
	}
	want := &Trajectory{
		TrajectoryID: "py-traj-1", PromptID: "py-prompt-1", GroupSize: 5, PolicyVersion: 7, CreatedAtMs: 1764500000000,
		Prompt: []int32{101, 102, 103, 104},
		Turns: []Turn{{Kind: KindSearch, Action: []int32{11, 12, 13}, Observation: []int32{21, 22, 23, 24}},
			{Kind: KindAnswer, Action: []int32{31, 32}}},
		PredAnswer: ptr("Paris"), GoldAnswers: []string{"Paris", "City of Paris"},
		GoldTarget: []int32{40, 41, 42, 43, 44}, GoldSpan: [2]int32{2, 4},
		RolloutLogprobs: []float32{-0.5, -0.25, -1.0, -0.125, -2.0}, Temperature: ptr(float32(1)),
	}
	if !reflect.DeepEqual(tr, want) {
		t.Fatalf("Python example decoded to\n%+v\nwant\n%+v", tr, want)
	}

	// Go's struct, written by Python, gives exactly Go's bytes.
	for _, tr := range []*Trajectory{sampleTrajectory(), func() *Trajectory {
		x := sampleTrajectory()
		x.Reward, x.PredAnswer, x.RolloutLogprobs, x.Temperature, x.GoldAnswers = nil, nil, nil, nil, []string{"a"}
		x.GoldTarget, x.GoldSpan = nil, [2]int32{}
		return x
	}()} {
		pyBytes := runPython(t, py, trajectoryJSON(tr), "produce_trajectory.py", "--json", "-")
		goBytes, _ := Trajectories().Encode(tr)
		if !bytes.Equal(pyBytes, goBytes) {
			t.Fatalf("Python and Go bytes differ:\npy %x\ngo %x", pyBytes, goBytes)
		}
	}
}

func TestPythonReaderInterop(t *testing.T) {
	py := pythonWithAvro(t)
	s := sampleSample()
	s.TokenRewards = []float32{0, 0, 0.25, 0, 0, 1}
	b, err := Samples().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sample.bin")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, py, nil, "read_sample.py", path)
	var got struct {
		TrajectoryID     string    `json:"trajectory_id"`
		Partial          bool      `json:"partial"`
		OutcomeAdvantage float64   `json:"outcome_advantage"`
		Tokens           []int32   `json:"tokens"`
		LossMask         []uint8   `json:"loss_mask"`
		Advantages       []float64 `json:"advantages"`
		TokenRewards     []float64 `json:"token_rewards"`
		RolloutLogprobs  []float64 `json:"rollout_logprobs"`
		Temperature      *float64  `json:"temperature"`
		Turns            []struct {
			Kind   string   `json:"kind"`
			Gate   int32    `json:"gate"`
			ZNorm  *float64 `json:"z_norm"`
			Weight *float64 `json:"weight"`
		} `json:"turns"`
		AttnSR *struct {
			Budget float64 `json:"budget"`
		} `json:"attnsr"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_sample.py output %q: %v", out, err)
	}
	f32 := func(v []float32) []float64 {
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = float64(x)
		}
		return o
	}
	if got.TrajectoryID != s.TrajectoryID || !got.Partial || got.OutcomeAdvantage != s.OutcomeAdvantage ||
		!reflect.DeepEqual(got.Tokens, s.Tokens) || !reflect.DeepEqual(got.LossMask, s.LossMask) ||
		!reflect.DeepEqual(got.Advantages, f32(s.Advantages)) || !reflect.DeepEqual(got.TokenRewards, f32(s.TokenRewards)) ||
		!reflect.DeepEqual(got.RolloutLogprobs, f32(s.RolloutLogprobs)) || got.Temperature == nil || *got.Temperature != 0.5 {
		t.Fatalf("Python read %+v", got)
	}
	if len(got.Turns) != 2 || got.Turns[0].Gate != 1 || *got.Turns[0].ZNorm != 0.3 || got.Turns[1].ZNorm != nil ||
		math.Abs(*got.Turns[0].Weight-1.1) > 0 || got.AttnSR == nil || got.AttnSR.Budget != 0.075 {
		t.Fatalf("Python read turns %+v attnsr %+v", got.Turns, got.AttnSR)
	}

	// A trajectory handed to the sample reader is refused as unknown_schema.
	tb, _ := Trajectories().Encode(sampleTrajectory())
	cmd := exec.Command(py, "-c", "import sys; from read_sample import decode_sample; decode_sample(sys.stdin.buffer.read())")
	cmd.Dir = examplesDir(t)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(tb)
	msg, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(msg, []byte("unknown_schema")) {
		t.Fatalf("Python reader accepted a trajectory: %v %s", err, msg)
	}
}

// TestPythonReadsV1Golden: the Python example reader resolves a sample
// written with the v1 schema (before scorer_policy_version and source).
func TestPythonReadsV1Golden(t *testing.T) {
	py := pythonWithAvro(t)
	path := filepath.Join(t.TempDir(), "sample-v1.bin")
	if err := os.WriteFile(path, golden(t, "sample")[0], 0o600); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, py, nil, "read_sample.py", path)
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_sample.py output %q: %v", out, err)
	}
	want := sampleSample()
	if got["trajectory_id"] != want.TrajectoryID || got["outcome_advantage"] != want.OutcomeAdvantage ||
		got["source"] != nil || got["scorer_policy_version"] != nil {
		t.Fatalf("Python read the v1 sample as %v", got)
	}
	if _, ok := got["source"]; !ok {
		t.Fatalf("Python did not resolve the v1 sample to the current schema (no source field): %v", got)
	}
}
