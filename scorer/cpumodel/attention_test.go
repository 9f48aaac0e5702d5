package cpumodel

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
)

// trajectorySteps lays out a prompt and steps of random sizes; withObs(j)
// says whether step j has an observation.
func trajectorySteps(r *rand.Rand, prompt, k, maxAct, maxObs int, withObs func(int) bool) ([]scorer.Step, int) {
	pos := prompt
	steps := make([]scorer.Step, k)
	for j := range steps {
		a := 1 + r.IntN(maxAct)
		steps[j].Action = [2]int{pos, pos + a}
		pos += a
		steps[j].Observation = [2]int{pos, pos}
		if withObs(j) {
			o := 1 + r.IntN(maxObs)
			steps[j].Observation = [2]int{pos, pos + o}
			pos += o
		}
	}
	return steps, pos
}

func maxDiff(a, b [][]float64) float64 {
	var d float64
	for i := range a {
		for j := range a[i] {
			d = math.Max(d, math.Abs(a[i][j]-b[i][j]))
		}
	}
	return d
}

func checkGraphShape(t *testing.T, g scorer.StepGraph, k int) {
	t.Helper()
	if len(g.AA) != k || len(g.AO) != k {
		t.Fatalf("layer %d: %d×? graphs, want %d", g.Layer, len(g.AA), k)
	}
	for j := 0; j < k; j++ {
		var row float64
		for c := 0; c < k; c++ {
			if c >= j && (g.AA[j][c] != 0 || g.AO[j][c] != 0) {
				t.Fatalf("layer %d: entry [%d][%d] = %v/%v, want 0 for k >= j", g.Layer, j, c, g.AA[j][c], g.AO[j][c])
			}
			if g.AA[j][c] < 0 || g.AO[j][c] < 0 {
				t.Fatalf("negative entry [%d][%d]", j, c)
			}
			row += g.AA[j][c] + g.AO[j][c]
		}
		if row > 1+1e-9 {
			t.Fatalf("layer %d: row %d sums to %v > 1", g.Layer, j, row)
		}
	}
}

func TestStepGraphsBlockwiseEqualsDense(t *testing.T) {
	m := TinyRandom()
	r := rand.New(rand.NewPCG(3, 3))
	cases := []struct {
		name               string
		prompt, k, act, ob int
		obs                func(int) bool
	}{
		{"more than two query blocks", 30, 6, 150, 40, func(j int) bool { return j != 2 }},
		{"no observations", 10, 5, 20, 1, func(int) bool { return false }},
		{"one step", 12, 1, 15, 10, func(int) bool { return true }},
		{"observation only on last", 5, 4, 8, 8, func(j int) bool { return j == 3 }},
	}
	for _, c := range cases {
		steps, n := trajectorySteps(r, c.prompt, c.k, c.act, c.ob, c.obs)
		toks := randTokens(r, n+3, TinyVocab)
		layers := []int{1, 0, 1}
		bw, err := m.StepGraphs(toks, steps, layers)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		dn, err := m.StepGraphsDense(toks, steps, layers)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var actions int
		for _, s := range steps {
			actions += s.Action[1] - s.Action[0]
		}
		if c.name == cases[0].name && actions <= 2*QueryBlock {
			t.Fatalf("first case has only %d query tokens", actions)
		}
		var nonzero bool
		for i, l := range layers {
			if bw[i].Layer != l || dn[i].Layer != l {
				t.Fatalf("%s: layer order %d/%d, want %d", c.name, bw[i].Layer, dn[i].Layer, l)
			}
			checkGraphShape(t, bw[i], c.k)
			if d := maxDiff(bw[i].AA, dn[i].AA); d > 1e-5 {
				t.Errorf("%s layer %d: AA differs by %v", c.name, l, d)
			}
			if d := maxDiff(bw[i].AO, dn[i].AO); d > 1e-5 {
				t.Errorf("%s layer %d: AO differs by %v", c.name, l, d)
			}
			for j := range steps {
				for k := 0; k < j; k++ {
					if bw[i].AA[j][k] > 0 {
						nonzero = true
					}
					if o := steps[k].Observation; o[0] == o[1] && bw[i].AO[j][k] != 0 {
						t.Errorf("%s: step %d has no observation but AO[%d][%d] = %v", c.name, k, j, k, bw[i].AO[j][k])
					}
				}
			}
		}
		if c.k > 1 && !nonzero {
			t.Errorf("%s: all-zero graphs", c.name)
		}
		if c.k > 1 && maxDiff(bw[0].AA, bw[1].AA) == 0 {
			t.Errorf("%s: layers 0 and 1 give identical graphs", c.name)
		}
	}
}

// The step graphs equal the ones built from the independent reference's
// attention probabilities (Qwen3 with q/k norms and GQA).
func TestStepGraphsMatchReference(t *testing.T) {
	cfg, ts, m := testModel(t, testArch{arch: "Qwen3ForCausalLM", headDim: 6}, 77)
	r := rand.New(rand.NewPCG(8, 8))
	steps, n := trajectorySteps(r, 6, 4, 6, 6, func(j int) bool { return j%2 == 0 })
	toks := randTokens(r, n, cfg.Vocab)
	ref := refForward(cfg, ts, toks)
	got, err := m.StepGraphs(toks, steps, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for li, l := range []int{0, 1} {
		for j, sj := range steps {
			for k := 0; k < j; k++ {
				var aa, ao float64
				for h := 0; h < cfg.Heads; h++ {
					for q := sj.Action[0]; q < sj.Action[1]; q++ {
						for key := steps[k].Action[0]; key < steps[k].Action[1]; key++ {
							aa += ref.attn[l][h][q][key]
						}
						for key := steps[k].Observation[0]; key < steps[k].Observation[1]; key++ {
							ao += ref.attn[l][h][q][key]
						}
					}
				}
				nq := float64((sj.Action[1] - sj.Action[0]) * cfg.Heads)
				if d := math.Abs(got[li].AA[j][k] - aa/nq); d > 1e-5 {
					t.Errorf("layer %d AA[%d][%d]: %v, reference %v", l, j, k, got[li].AA[j][k], aa/nq)
				}
				if d := math.Abs(got[li].AO[j][k] - ao/nq); d > 1e-5 {
					t.Errorf("layer %d AO[%d][%d]: %v, reference %v", l, j, k, got[li].AO[j][k], ao/nq)
				}
			}
		}
	}
}

func TestStepGraphsRejectsBadInput(t *testing.T) {
	m := TinyRandom()
	toks := make([]int32, 20)
	ok := []scorer.Step{{Action: [2]int{2, 5}, Observation: [2]int{5, 8}}, {Action: [2]int{8, 12}}}
	for name, c := range map[string]struct {
		toks   []int32
		steps  []scorer.Step
		layers []int
		want   string
	}{
		"layer too big":      {toks, ok, []int{2}, "layer 2"},
		"negative layer":     {toks, ok, []int{-1}, "layer -1"},
		"no layers":          {toks, ok, nil, "no layers"},
		"token out of range": {append([]int32{TinyVocab}, toks...), ok, []int{0}, "vocabulary"},
		"no tokens":          {nil, ok, []int{0}, "empty"},
		"action past end":    {toks, []scorer.Step{{Action: [2]int{15, 21}}}, []int{0}, "step 0"},
		"reversed action":    {toks, []scorer.Step{{Action: [2]int{5, 3}}}, []int{0}, "step 0"},
		"overlapping steps":  {toks, []scorer.Step{ok[0], {Action: [2]int{7, 9}}}, []int{0}, "step 1"},
		"obs before action":  {toks, []scorer.Step{{Action: [2]int{5, 8}, Observation: [2]int{6, 9}}}, []int{0}, "observation"},
		"obs past end":       {toks, []scorer.Step{{Action: [2]int{5, 8}, Observation: [2]int{8, 30}}}, []int{0}, "observation"},
	} {
		for _, f := range []func([]int32, []scorer.Step, []int) ([]scorer.StepGraph, error){m.StepGraphs, m.StepGraphsDense} {
			if _, err := f(c.toks, c.steps, c.layers); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want mention of %q", name, err, c.want)
			}
		}
	}
}

func TestDefaultLayers(t *testing.T) {
	for n, want := range map[int][]int{28: {8, 10, 12, 14, 16, 18}, 36: {10, 13, 16, 18, 21, 23}, 2: {0, 0, 0, 1, 1, 1}} {
		got := DefaultLayers(n)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("DefaultLayers(%d) = %v, want %v", n, got, want)
				break
			}
		}
	}
}

func TestScoreJSONL(t *testing.T) {
	m := TinyRandom()
	r := rand.New(rand.NewPCG(1, 9))
	rows := searchRows(r, 256, TinyDelete)
	var in bytes.Buffer
	for _, row := range rows {
		b, _ := json.Marshal(map[string]any{"context": row.Context, "target": row.Target, "span": row.Span})
		in.Write(append(b, '\n'))
	}
	in.WriteString("\n") // blank lines are skipped
	var out bytes.Buffer
	if err := RunScoreJSONL(m, &in, &out); err != nil {
		t.Fatal(err)
	}
	want, _, _ := m.ScoreRowsNaive(rows)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("%d output lines for %d rows", len(lines), len(rows))
	}
	for i, l := range lines {
		var o struct{ Score float64 }
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatal(err)
		}
		if o.Score != want[i] {
			t.Errorf("line %d: %v, want %v (full precision)", i+1, o.Score, want[i])
		}
	}
	// A bad line stops with its line number; earlier lines are answered.
	bad := `{"context":[1,2],"target":[3,4],"span":[0,2]}` + "\n" + `{"context":[1,2],"target":[3,4],"span":[0,9]}` + "\n"
	out.Reset()
	err := RunScoreJSONL(m, strings.NewReader(bad), &out)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
	if strings.Count(out.String(), "score") != 1 {
		t.Fatalf("lines before the bad one not answered: %q", out.String())
	}
	for _, b := range []string{`{"context":[1],"target":[2]}`, `{"context":[1],"target":[2],"span":[0,1],"x":1}`, `not json`, `{"context":[1],"target":[999],"span":[0,1]}`} {
		if err := RunScoreJSONL(m, strings.NewReader(b), &out); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: err = %v", b, err)
		}
	}
}

func TestAttentionJSONL(t *testing.T) {
	m := TinyRandom()
	in := `{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12],"steps":[{"action":[2,4],"observation":[4,6]},{"action":[6,8],"observation":null},{"action":[8,12]}],"layers":[1]}
{"tokens":[1,2,3,4,5,6],"steps":[{"action":[0,2]},{"action":[2,6]}]}
`
	var out bytes.Buffer
	if err := RunAttentionJSONL(m, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines", len(lines))
	}
	var o struct {
		Layers []struct {
			Layer  int
			AA, AO [][]float64
		}
	}
	json.Unmarshal([]byte(lines[0]), &o)
	steps := []scorer.Step{{Action: [2]int{2, 4}, Observation: [2]int{4, 6}}, {Action: [2]int{6, 8}, Observation: [2]int{8, 8}}, {Action: [2]int{8, 12}, Observation: [2]int{12, 12}}}
	want, _ := m.StepGraphs([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, steps, []int{1})
	if len(o.Layers) != 1 || o.Layers[0].Layer != 1 || maxDiff(o.Layers[0].AA, want[0].AA) != 0 || maxDiff(o.Layers[0].AO, want[0].AO) != 0 {
		t.Fatalf("output %s, want %+v", lines[0], want[0])
	}
	json.Unmarshal([]byte(lines[1]), &o)
	if len(o.Layers) != 2 || o.Layers[0].Layer != 0 || o.Layers[1].Layer != 1 {
		t.Fatalf("default layers: %s", lines[1])
	}
	err := RunAttentionJSONL(m, strings.NewReader(in+`{"tokens":[1],"steps":[{"action":[0,5]}]}`+"\n"), &out)
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad line: %v", err)
	}
}

// `creditflow score` takes an optional "temperature" per line (absent or
// null: 1); a temperature that is not > 0 stops the run naming the line.
func TestScoreJSONLTemperature(t *testing.T) {
	m := TinyRandom()
	r := rand.New(rand.NewPCG(2, 9))
	rows := searchRows(r, 256, TinyDelete)[:3]
	rows[0].Temperature, rows[1].Temperature = 0.5, 1.5
	var in bytes.Buffer
	for i, row := range rows {
		line := map[string]any{"context": row.Context, "target": row.Target, "span": row.Span}
		if i < 2 {
			line["temperature"] = row.Temperature
		} else {
			line["temperature"] = nil
		}
		b, _ := json.Marshal(line)
		in.Write(append(b, '\n'))
	}
	var out bytes.Buffer
	if err := RunScoreJSONL(m, &in, &out); err != nil {
		t.Fatal(err)
	}
	want, _, _ := m.ScoreRowsNaive(rows)
	for i, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var o struct{ Score float64 }
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatal(err)
		}
		if o.Score != want[i] {
			t.Errorf("line %d: %v, want %v", i+1, o.Score, want[i])
		}
	}
	for _, b := range []string{`{"context":[1],"target":[2],"span":[0,1],"temperature":0}`, `{"context":[1],"target":[2],"span":[0,1],"temperature":-2}`} {
		if err := RunScoreJSONL(m, strings.NewReader(b), &out); err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "temperature") {
			t.Errorf("%s: err = %v", b, err)
		}
	}
}
