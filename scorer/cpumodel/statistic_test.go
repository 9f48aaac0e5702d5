package cpumodel

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// refStatistic is a row's entropy or KL from the float64 reference forward
// pass (ref_test.go): its logits divided by temp, log-softmax in float64.
func refStatistic(cfg *config, ts []safetensors.Tensor, r scorer.Row, stat string, temp float64) float64 {
	logp := func(ctx []int32) [][]float64 {
		seq := append(append([]int32(nil), ctx...), r.Target...)
		o := refForward(cfg, ts, seq)
		var out [][]float64
		for k := r.Span[0]; k < r.Span[1]; k++ {
			lg := o.logits[len(ctx)+k-1]
			mx := math.Inf(-1)
			for _, v := range lg {
				mx = math.Max(mx, v/temp)
			}
			var z float64
			for _, v := range lg {
				z += math.Exp(v/temp - mx)
			}
			lp := make([]float64, len(lg))
			for i, v := range lg {
				lp[i] = v/temp - mx - math.Log(z)
			}
			out = append(out, lp)
		}
		return out
	}
	ps := logp(r.Context)
	var qs [][]float64
	if stat == scorer.StatKL {
		qs = logp(r.ReferenceContext)
	}
	var s float64
	for k, lp := range ps {
		for v, l := range lp {
			if stat == scorer.StatEntropy {
				s -= math.Exp(l) * l
			} else {
				s += math.Exp(l) * (l - qs[k][v])
			}
		}
	}
	return s / float64(len(ps))
}

// TestStatisticsAgainstReference compares entropy and KL rows of every
// supported architecture with the float64 reference, at temperatures 1 and
// 0.7, and checks properties: logprob is ScoreRows, KL of a context with
// itself is 0, entropy lies in [0, log V] and grows with the temperature.
func TestStatisticsAgainstReference(t *testing.T) {
	for i, a := range archs {
		cfg, ts, m := testModel(t, a, uint64(700+i))
		r := rand.New(rand.NewPCG(uint64(i), 11))
		var rows []scorer.Row
		for j := 0; j < 4; j++ {
			rows = append(rows, scorer.Row{Context: randTokens(r, 3+r.IntN(20), cfg.Vocab), Target: randTokens(r, 7, cfg.Vocab),
				Span: [2]int{1 + j%2, 4 + j%3}, ReferenceContext: randTokens(r, 2+r.IntN(20), cfg.Vocab), Temperature: []float64{0, 0.7}[j%2]})
		}
		for _, stat := range []string{scorer.StatEntropy, scorer.StatKL} {
			got, u, err := m.ScoreRowsStatistic(rows, stat)
			if err != nil {
				t.Fatal(err)
			}
			if u.TokensForwarded == 0 {
				t.Fatalf("%s: no usage counted", stat)
			}
			for j, row := range rows {
				temp := row.Temperature
				if temp == 0 {
					temp = 1
				}
				want := refStatistic(cfg, ts, row, stat, temp)
				if math.Abs(got[j]-want) > 2e-5*math.Max(1, math.Abs(want)) {
					t.Errorf("%s %s row %d: %v, reference %v", archName(a), stat, j, got[j], want)
				}
				if stat == scorer.StatEntropy && (got[j] < 0 || got[j] > math.Log(float64(cfg.Vocab))+1e-9) {
					t.Errorf("%s row %d: entropy %v outside [0, log %d]", archName(a), j, got[j], cfg.Vocab)
				}
				if stat == scorer.StatKL && got[j] < -1e-12 {
					t.Errorf("%s row %d: KL %v < 0", archName(a), j, got[j])
				}
			}
		}
		lp, _, err := m.ScoreRowsStatistic(rows, scorer.StatLogProb)
		sr, _, _ := m.ScoreRows(rows)
		if err != nil || len(lp) != len(sr) || lp[0] != sr[0] || lp[3] != sr[3] {
			t.Fatalf("logprob statistic differs from ScoreRows: %v %v (%v)", lp, sr, err)
		}
		same := append([]scorer.Row(nil), rows...)
		for j := range same {
			same[j].ReferenceContext = same[j].Context
		}
		if kl, _, _ := m.ScoreRowsStatistic(same, scorer.StatKL); kl[0] != 0 || kl[2] != 0 {
			t.Fatalf("KL of a context with itself: %v", kl)
		}
		hot := append([]scorer.Row(nil), rows[:1]...)
		hot[0].Temperature = 3
		cold := append([]scorer.Row(nil), rows[:1]...)
		cold[0].Temperature = 0.3
		h3, _, _ := m.ScoreRowsStatistic(hot, scorer.StatEntropy)
		h03, _, _ := m.ScoreRowsStatistic(cold, scorer.StatEntropy)
		if !(h3[0] > h03[0]) {
			t.Fatalf("entropy at temperature 3 (%v) not above that at 0.3 (%v)", h3[0], h03[0])
		}
	}
	_, _, m := testModel(t, archs[0], 1)
	if _, _, err := m.ScoreRowsStatistic([]scorer.Row{{Context: []int32{1}, Target: []int32{2, 3}, Span: [2]int{0, 2}}}, scorer.StatKL); err == nil {
		t.Fatal("a kl row without a reference context was scored")
	}
	if _, _, err := m.ScoreRowsStatistic(nil, "perplexity"); err == nil {
		t.Fatal("an unknown statistic was accepted")
	}
}

// TestScoreJSONLStatistic runs the JSON Lines command with each statistic.
func TestScoreJSONLStatistic(t *testing.T) {
	m := TinyRandom()
	in := `{"context":[1,2,3],"target":[4,5,6],"span":[0,3]}
{"context":[7,8],"target":[4,5,6],"span":[1,3],"temperature":0.5}
`
	kl := `{"context":[1,2,3],"target":[4,5,6],"span":[0,3],"reference_context":[1,2,3]}
{"context":[7,8],"target":[4,5,6],"span":[1,3],"reference_context":[9]}
`
	run := func(stat, in string) ([]float64, error) {
		var out bytes.Buffer
		err := RunScoreJSONLStatistic(m, strings.NewReader(in), &out, stat)
		var s []float64
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var v struct{ Score float64 }
			if l != "" && json.Unmarshal([]byte(l), &v) == nil {
				s = append(s, v.Score)
			}
		}
		return s, err
	}
	ent, err := run(scorer.StatEntropy, in)
	if err != nil || len(ent) != 2 {
		t.Fatalf("entropy: %v %v", ent, err)
	}
	want, _, _ := m.ScoreRowsStatistic([]scorer.Row{{Context: []int32{7, 8}, Target: []int32{4, 5, 6}, Span: [2]int{1, 3}, Temperature: 0.5}}, scorer.StatEntropy)
	if ent[1] != want[0] {
		t.Fatalf("entropy line 2: %v, ScoreRowsStatistic %v", ent[1], want[0])
	}
	k, err := run(scorer.StatKL, kl)
	if err != nil || len(k) != 2 || k[0] != 0 || !(k[1] > 0) {
		t.Fatalf("kl: %v %v", k, err)
	}
	if _, err := run(scorer.StatKL, in); err == nil || !strings.Contains(err.Error(), "reference_context") {
		t.Fatalf("kl rows without a reference context: %v", err)
	}
	if _, err := run(scorer.StatEntropy, kl); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a reference context with entropy: %v", err)
	}
	lp, err := run(scorer.StatLogProb, in)
	var plain bytes.Buffer
	_ = RunScoreJSONL(m, strings.NewReader(in), &plain)
	if err != nil || len(lp) != 2 || !strings.Contains(plain.String(), "score") {
		t.Fatalf("logprob: %v %v", lp, err)
	}
}

// TestTorchStatistics checks entropy and KL against testdata/llama_ref.py,
// the independent PyTorch implementation (float64 softmax), on the tiny
// models and on random models of every architecture written as safetensors
// (F32, BF16, F16).
func TestTorchStatistics(t *testing.T) {
	py := torchPython(t)
	type job struct {
		Dir   string           `json:"dir"`
		Mode  string           `json:"mode"`
		Lines []map[string]any `json:"lines"`
	}
	var jobs []job
	var models []*Model
	var rowsets [][]scorer.Row
	add := func(write func(dir string) error, vocab int) {
		dir := t.TempDir()
		if err := write(dir); err != nil {
			t.Fatal(err)
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(len(models)), 5))
		var rows []scorer.Row
		var lines []map[string]any
		for j := 0; j < 3; j++ {
			row := scorer.Row{Context: randTokens(r, 4+r.IntN(30), vocab), Target: randTokens(r, 8, vocab), Span: [2]int{2, 5 + j},
				ReferenceContext: randTokens(r, 3+r.IntN(30), vocab), Temperature: []float64{1, 0.6, 1.5}[j]}
			rows = append(rows, row)
			lines = append(lines, map[string]any{"context": row.Context, "target": row.Target, "span": row.Span[:],
				"reference_context": row.ReferenceContext, "temperature": row.Temperature})
		}
		models, rowsets = append(models, m), append(rowsets, rows)
		jobs = append(jobs, job{Dir: dir, Mode: scorer.StatEntropy, Lines: lines}, job{Dir: dir, Mode: scorer.StatKL, Lines: lines})
	}
	add(WriteTiny, 256)
	add(WriteTinyRandom, 256)
	for i, a := range archs {
		cfg, ts, _ := testModel(t, a, uint64(900+i))
		dtype := []string{"F32", "BF16", "F16"}[i%3]
		add(func(dir string) error { return writeModel(dir, cfg, ts, dtype) }, cfg.Vocab)
	}
	in, _ := json.Marshal(jobs)
	cmd := exec.Command(py, "testdata/llama_ref.py", "--jobs")
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("llama_ref.py: %v\n%s", err, errb.String())
	}
	var res [][]struct{ Score float64 }
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != len(jobs) {
		t.Fatalf("llama_ref.py output: %v (%d results for %d jobs)", err, len(res), len(jobs))
	}
	worst := 0.0
	for mi, m := range models {
		for si, stat := range []string{scorer.StatEntropy, scorer.StatKL} {
			got, _, err := m.ScoreRowsStatistic(rowsets[mi], stat)
			if err != nil {
				t.Fatal(err)
			}
			for j, g := range got {
				w := res[2*mi+si][j].Score
				d := math.Abs(g - w)
				worst = math.Max(worst, d/math.Max(1, math.Abs(w)))
				if d > 1e-4*math.Max(1, math.Abs(w)) {
					t.Errorf("model %d %s row %d: %v, torch %v", mi, stat, j, g, w)
				}
			}
		}
	}
	t.Logf("largest relative difference from torch: %.2g over %d models", worst, len(models))
}
