package cpumodel

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/creditflow/creditflow/scorer"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// torchPython is the project's Python environment (internal/pyenv), which has
// PyTorch 2.
func torchPython(t *testing.T) string {
	t.Helper()
	return pyenvtest.Python(t)
}

type pyJob struct {
	Dir   string           `json:"dir"`
	Mode  string           `json:"mode"`
	Lines []map[string]any `json:"lines"`
}

// TestTorchCrossCheck runs testdata/llama_ref.py, an independent PyTorch
// implementation reading the same safetensors files (F32, F16, BF16; every
// supported architecture), and compares scores and step graphs.
func TestTorchCrossCheck(t *testing.T) {
	py := torchPython(t)
	type modelCase struct {
		name  string
		m     *Model
		vocab int
		rows  []scorer.Row
		toks  []int32
		steps []scorer.Step
	}
	var cases []*modelCase
	var jobs []pyJob
	add := func(name string, write func(dir string) error, vocab int) {
		dir := t.TempDir()
		if err := write(dir); err != nil {
			t.Fatal(err)
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		c := &modelCase{name: name, m: m, vocab: vocab}
		r := rand.New(rand.NewPCG(uint64(len(cases)), 3))
		score := pyJob{Dir: dir, Mode: "score"}
		for j := 0; j < 4; j++ {
			row := scorer.Row{Context: randTokens(r, 5+r.IntN(40), vocab), Target: randTokens(r, 8, vocab), Span: [2]int{2, 6 + j%3}}
			c.rows = append(c.rows, row)
			score.Lines = append(score.Lines, map[string]any{"context": row.Context, "target": row.Target, "span": row.Span[:]})
		}
		steps, n := trajectorySteps(r, 7, 4, 9, 9, func(j int) bool { return j != 1 })
		c.toks, c.steps = randTokens(r, n, vocab), steps
		js := make([]map[string]any, len(steps))
		for j, s := range steps {
			js[j] = map[string]any{"action": s.Action[:], "observation": nil}
			if s.Observation[0] != s.Observation[1] {
				js[j]["observation"] = s.Observation[:]
			}
		}
		cases = append(cases, c)
		jobs = append(jobs, score, pyJob{Dir: dir, Mode: "attention", Lines: []map[string]any{{"tokens": c.toks, "steps": js, "layers": []int{0, 1}}}})
	}
	add("tiny", WriteTiny, 256) // the trained built-in model
	add("tiny-random", WriteTinyRandom, 256)
	for i, a := range archs {
		cfg, ts, _ := testModel(t, a, uint64(500+i))
		dtype := []string{"F32", "BF16", "F16"}[i%3]
		add(archName(a)+"/"+dtype, func(dir string) error { return writeModel(dir, cfg, ts, dtype) }, cfg.Vocab)
	}
	in, _ := json.Marshal(jobs)
	cmd := exec.Command(py, "testdata/llama_ref.py", "--jobs")
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("llama_ref.py: %v\n%s", err, errb.String())
	}
	var res [][]struct {
		Score  float64
		Layers []struct{ AA, AO [][]float64 }
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != len(jobs) {
		t.Fatalf("llama_ref.py output: %v (%d results for %d jobs)", err, len(res), len(jobs))
	}
	for ci, c := range cases {
		got, _, err := c.m.ScoreRows(c.rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			w := res[2*ci][i].Score
			if math.Abs(g-w) > 1e-4*math.Max(1, math.Abs(w)) {
				t.Errorf("%s row %d: %v, torch %v", c.name, i, g, w)
			}
		}
		gg, err := c.m.StepGraphs(c.toks, c.steps, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		tw := res[2*ci+1][0].Layers
		if len(tw) != 2 {
			t.Fatalf("%s: torch attention output has %d layers", c.name, len(tw))
		}
		for l := range gg {
			if d := math.Max(maxDiff(gg[l].AA, tw[l].AA), maxDiff(gg[l].AO, tw[l].AO)); d > 1e-5 {
				t.Errorf("%s layer %d: step graphs differ from torch by %v", c.name, l, d)
			}
		}
	}
}
