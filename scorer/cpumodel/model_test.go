package cpumodel

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

var archs = []testArch{
	{arch: "LlamaForCausalLM"},
	{arch: "LlamaForCausalLM", tied: true},
	{arch: "LlamaForCausalLM", attnBias: true},
	{arch: "LlamaForCausalLM", mlpBias: true},
	{arch: "Qwen2ForCausalLM", tied: true},
	{arch: "Qwen3ForCausalLM", headDim: 6}, // head_dim differs from hidden/heads
}

func archName(a testArch) string {
	s := a.arch
	if a.tied {
		s += "/tied"
	}
	if a.attnBias {
		s += "/bias"
	}
	if a.mlpBias {
		s += "/mlpbias"
	}
	return s
}

// The model matches the independent float64 reference on every architecture.
func TestMatchesReference(t *testing.T) {
	for i, a := range archs {
		t.Run(archName(a), func(t *testing.T) {
			cfg, ts, m := testModel(t, a, uint64(100+i))
			r := rand.New(rand.NewPCG(uint64(i), 1))
			var rows []scorer.Row
			for j := 0; j < 6; j++ {
				tgt := randTokens(r, 5+r.IntN(6), cfg.Vocab)
				a := r.IntN(len(tgt) - 1)
				rows = append(rows, scorer.Row{Context: randTokens(r, 1+r.IntN(30), cfg.Vocab), Target: tgt, Span: [2]int{a, a + 1 + r.IntN(len(tgt)-a)}})
			}
			got, _, err := m.ScoreRows(rows)
			if err != nil {
				t.Fatal(err)
			}
			for j, row := range rows {
				want := refScore(cfg, ts, row)
				if math.Abs(got[j]-want) > 2e-5*math.Max(1, math.Abs(want)) {
					t.Errorf("row %d: score %.9f, reference %.9f", j, got[j], want)
				}
			}
		})
	}
}

// A hand-sized case: one token of context, one scored token. With all
// projections zero the network reduces to the LM head applied to the final
// norm of the embedding, which the test computes by hand.
func TestHandComputedZeroAttention(t *testing.T) {
	cfg, ts, _ := testModel(t, testArch{arch: "LlamaForCausalLM"}, 5)
	for i := range ts {
		if strings.Contains(ts[i].Name, "proj") {
			for j := range ts[i].Data {
				ts[i].Data[j] = 0
			}
		}
	}
	m, err := fromTensors(cfg, ts)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]float32{}
	for _, x := range ts {
		byName[x.Name] = x.Data
	}
	ctx, tgt := int32(3), int32(7)
	H := cfg.Hidden
	e := byName["model.embed_tokens.weight"][int(ctx)*H : (int(ctx)+1)*H]
	var ss float64
	for _, v := range e {
		ss += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(ss/float64(H)+cfg.RMSNormEps)
	logits := make([]float64, cfg.Vocab)
	var z float64
	for v := range logits {
		for i := 0; i < H; i++ {
			logits[v] += float64(byName["lm_head.weight"][v*H+i]) * float64(e[i]) * r * float64(byName["model.norm.weight"][i])
		}
	}
	for _, l := range logits {
		z += math.Exp(l)
	}
	want := logits[tgt] - math.Log(z)
	got, _, err := m.ScoreRows([]scorer.Row{{Context: []int32{ctx}, Target: []int32{tgt}, Span: [2]int{0, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got[0]-want) > 1e-5 {
		t.Fatalf("score %v, hand-computed %v", got[0], want)
	}
}

// Biases (Qwen2, Llama attention_bias) and q/k norms (Qwen3) change the
// output, and the changed model still matches the reference.
func TestBiasAndNormWeightsMatter(t *testing.T) {
	for _, c := range []struct {
		arch testArch
		name string
	}{
		{testArch{arch: "Qwen2ForCausalLM"}, "model.layers.0.self_attn.k_proj.bias"},
		{testArch{arch: "Qwen2ForCausalLM"}, "model.layers.1.self_attn.v_proj.bias"},
		{testArch{arch: "LlamaForCausalLM", attnBias: true}, "model.layers.0.self_attn.o_proj.bias"},
		{testArch{arch: "LlamaForCausalLM", mlpBias: true}, "model.layers.1.mlp.up_proj.bias"},
		{testArch{arch: "Qwen3ForCausalLM", headDim: 6}, "model.layers.0.self_attn.q_norm.weight"},
		{testArch{arch: "Qwen3ForCausalLM", headDim: 6}, "model.layers.1.self_attn.k_norm.weight"},
	} {
		cfg, ts, m := testModel(t, c.arch, 9)
		row := scorer.Row{Context: []int32{1, 5, 2, 8, 3, 3, 9}, Target: []int32{4, 6, 1, 0}, Span: [2]int{1, 4}}
		before, _, err := m.ScoreRows([]scorer.Row{row})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for i := range ts {
			if ts[i].Name == c.name {
				found = true
				for j := range ts[i].Data {
					ts[i].Data[j] = ts[i].Data[j]*1.5 + 0.3
				}
			}
		}
		if !found {
			t.Fatalf("%s: tensor %s not generated", archName(c.arch), c.name)
		}
		m2, err := fromTensors(cfg, ts)
		if err != nil {
			t.Fatal(err)
		}
		after, _, err := m2.ScoreRows([]scorer.Row{row})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(after[0]-before[0]) < 1e-4 {
			t.Errorf("%s: changing %s did not change the score (%v)", archName(c.arch), c.name, after[0])
		}
		if want := refScore(cfg, ts, row); math.Abs(after[0]-want) > 2e-5*math.Max(1, math.Abs(want)) {
			t.Errorf("%s after changing %s: score %v, reference %v", archName(c.arch), c.name, after[0], want)
		}
	}
}

// Tied: the LM head is the embedding; the same tensors with an untied head
// give different numbers.
func TestTiedVersusUntied(t *testing.T) {
	cfgT, tsT, mT := testModel(t, testArch{arch: "LlamaForCausalLM", tied: true}, 3)
	if &mT.lmHead[0] != &mT.embed[0] {
		t.Fatal("tied model does not share the embedding as LM head")
	}
	cfgU := *cfgT
	cfgU.TieEmbeddings = false
	tsU := append([]safetensors.Tensor(nil), tsT...)
	head := make([]float32, cfgT.Vocab*cfgT.Hidden)
	for i := range head {
		head[i] = float32(math.Sin(float64(i)))
	}
	tsU = append(tsU, safetensors.Tensor{Name: "lm_head.weight", Shape: []int{cfgT.Vocab, cfgT.Hidden}, Data: head})
	mU, err := fromTensors(&cfgU, tsU)
	if err != nil {
		t.Fatal(err)
	}
	row := scorer.Row{Context: []int32{1, 2, 3}, Target: []int32{4, 5}, Span: [2]int{0, 2}}
	sT, _, _ := mT.ScoreRows([]scorer.Row{row})
	sU, _, _ := mU.ScoreRows([]scorer.Row{row})
	if math.Abs(sT[0]-sU[0]) < 1e-4 {
		t.Fatalf("tied and untied heads give the same score %v", sT[0])
	}
	if want := refScore(&cfgU, tsU, row); math.Abs(sU[0]-want) > 2e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("untied: %v, reference %v", sU[0], want)
	}
	// Untied config without lm_head is an error.
	if _, err := fromTensors(&cfgU, tsT); err == nil || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Fatalf("untied config without lm_head: err = %v", err)
	}
}

func searchRows(r *rand.Rand, vocab int, placeholder int32) []scorer.Row {
	prompt := randTokens(r, 40, vocab)
	var turns [][]int32
	for i := 0; i < 3; i++ {
		turns = append(turns, randTokens(r, 10+r.IntN(20), vocab))
	}
	tgt := randTokens(r, 12, vocab)
	full := append([]int32(nil), prompt...)
	for _, tr := range turns {
		full = append(full, tr...)
	}
	rows := []scorer.Row{{Context: full, Target: tgt, Span: [2]int{4, 9}}}
	for i := range turns {
		c := append([]int32(nil), prompt...)
		for j, tr := range turns {
			if j == i {
				c = append(c, placeholder)
			} else {
				c = append(c, tr...)
			}
		}
		rows = append(rows, scorer.Row{Context: c, Target: tgt, Span: [2]int{4, 9}})
	}
	return rows
}

// Prefix sharing gives exactly the row-by-row numbers, in batches of any
// size, while forwarding fewer tokens.
func TestPrefixSharingEqualsNaive(t *testing.T) {
	m := Tiny()
	r := rand.New(rand.NewPCG(42, 42))
	var rows []scorer.Row
	for i := 0; i < 4; i++ {
		rows = append(rows, searchRows(r, 256, TinyDelete)...)
	}
	rows = append(rows, rows[2])                                                                           // a duplicate row
	rows = append(rows, scorer.Row{Context: rows[0].Context, Target: rows[0].Target, Span: [2]int{0, 12}}) // same sequence, other span
	rows = append(rows, scorer.Row{Context: rows[0].Context[:30], Target: rows[0].Context[30:60], Span: [2]int{3, 20}})
	shared, us, err := m.ScoreRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	naive, un, err := m.ScoreRowsNaive(rows)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if shared[i] != naive[i] {
			t.Errorf("row %d: shared %v, naive %v", i, shared[i], naive[i])
		}
		one, _, err := m.ScoreRows(rows[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		if one[0] != shared[i] {
			t.Errorf("row %d: alone %v, in batch %v", i, one[0], shared[i])
		}
		if math.IsNaN(shared[i]) || shared[i] >= 0 {
			t.Errorf("row %d: score %v is not a negative log-probability", i, shared[i])
		}
	}
	if un.TokensForwarded != un.TokensRowByRow || us.TokensRowByRow != un.TokensRowByRow {
		t.Fatalf("usage: naive %+v shared %+v", un, us)
	}
	if us.TokensForwarded >= us.TokensRowByRow*7/10 {
		t.Errorf("shared forwarded %d of %d row-by-row tokens: expected real sharing", us.TokensForwarded, us.TokensRowByRow)
	}
	// The deleted turn matters: c_full and c_-t scores differ.
	if shared[0] == shared[1] {
		t.Error("replacing a turn by the placeholder did not change the score")
	}
}

func TestTruncation(t *testing.T) {
	cfg, ts, m := testModel(t, testArch{arch: "LlamaForCausalLM"}, 11)
	r := rand.New(rand.NewPCG(1, 2))
	long := randTokens(r, 80, cfg.Vocab) // max context 64
	tgt := randTokens(r, 10, cfg.Vocab)
	rows := []scorer.Row{{Context: long, Target: tgt, Span: [2]int{2, 7}}, {Context: long[70:], Target: tgt, Span: [2]int{2, 7}}}
	s, u, err := m.ScoreRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	if u.Truncations != 1 {
		t.Fatalf("truncations %d, want 1", u.Truncations)
	}
	cut := scorer.Row{Context: long[80+10-64:], Target: tgt, Span: [2]int{2, 7}}
	if want := refScore(cfg, ts, cut); math.Abs(s[0]-want) > 2e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("truncated row %v, reference on the rightmost tokens %v", s[0], want)
	}
	sn, un, _ := m.ScoreRowsNaive(rows)
	if sn[0] != s[0] || un.Truncations != 1 {
		t.Fatalf("naive %v %+v", sn, un)
	}
}

func TestScoreRowsRejectsBadInput(t *testing.T) {
	m := Tiny()
	good := scorer.Row{Context: []int32{1, 2}, Target: []int32{3, 4}, Span: [2]int{0, 2}}
	for name, r := range map[string]scorer.Row{
		"token too big":    {Context: []int32{1, TinyVocab}, Target: []int32{3}, Span: [2]int{0, 1}},
		"negative token":   {Context: []int32{1}, Target: []int32{-1}, Span: [2]int{0, 1}},
		"span past end":    {Context: []int32{1}, Target: []int32{3}, Span: [2]int{0, 2}},
		"negative span":    {Context: []int32{1}, Target: []int32{3}, Span: [2]int{-1, 1}},
		"empty span":       {Context: []int32{1}, Target: []int32{3, 4}, Span: [2]int{1, 1}},
		"no conditioning":  {Context: nil, Target: []int32{3, 4}, Span: [2]int{0, 1}},
		"target too large": {Context: []int32{1}, Target: make([]int32, 40000), Span: [2]int{0, 1}},
	} {
		for _, f := range []func([]scorer.Row) ([]float64, scorer.Usage, error){m.ScoreRows, m.ScoreRowsNaive} {
			if _, _, err := f([]scorer.Row{good, r}); err == nil || !strings.Contains(err.Error(), "row 1") {
				t.Errorf("%s: err = %v, want an error naming row 1", name, err)
			}
		}
	}
}

// splitmix64 with seed 0 has published outputs; pinning them (and a few tiny
// weights) keeps the tiny model identical everywhere.
func TestTinyDeterministic(t *testing.T) {
	r := &splitmix64{}
	for _, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.next(); got != want {
			t.Fatalf("splitmix64: %#x, want %#x", got, want)
		}
	}
	a, b := TinyRandom(), TinyRandom()
	for i := range a.embed {
		if a.embed[i] != b.embed[i] {
			t.Fatal("two TinyRandom() calls differ")
		}
	}
	info := a.Info()
	if info.Name != TinyRandomName || info.Layers != 2 || info.VocabSize != TinyVocab || info.MaxContext != 32768 ||
		len(info.PlaceholderIDs) != 1 || info.PlaceholderIDs[0] != TinyDelete {
		t.Fatalf("info %+v", info)
	}
	if info := Tiny().Info(); info.Name != TinyName || info.Layers != 3 || info.VocabSize != TinyVocab ||
		len(info.PlaceholderIDs) != 1 || info.PlaceholderIDs[0] != TinyDelete {
		t.Fatalf("trained tiny info %+v", info)
	}
	for name, want := range map[string]string{"": TinyName, "tiny": TinyName, "tiny-random": TinyRandomName, TinyRandomName: TinyRandomName} {
		if m, ok := Builtin(name); !ok || m.Info().Name != want {
			t.Fatalf("Builtin(%q): %v", name, ok)
		}
	}
	if _, ok := Builtin("./tiny"); ok {
		t.Fatal("Builtin accepts a folder name")
	}
	// Outputs depend on the input.
	s, _, err := a.ScoreRows([]scorer.Row{
		{Context: TinyTokens("The capital of France is"), Target: TinyTokens(" Paris."), Span: [2]int{1, 6}},
		{Context: TinyTokens("The capital of Italy is"), Target: TinyTokens(" Paris."), Span: [2]int{1, 6}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s[0] == s[1] {
		t.Fatal("different contexts give the same score")
	}
}

func TestExpNeg(t *testing.T) {
	var worst float64
	for x := float32(0); x > -88; x -= 0.001953125 * 3.3 {
		got, want := float64(expNeg(x)), math.Exp(float64(x))
		if x < -87 {
			continue
		}
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Fatalf("expNeg relative error %v", worst)
	}
	if expNeg(0) != 1 || expNeg(-100) != 0 {
		t.Fatalf("expNeg(0) = %v, expNeg(-100) = %v", expNeg(0), expNeg(-100))
	}
}

// One model serves many goroutines at once with the same results.
func TestConcurrentUse(t *testing.T) {
	m := Tiny()
	r := rand.New(rand.NewPCG(9, 9))
	rows := searchRows(r, 256, TinyDelete)
	steps, n := trajectorySteps(r, 10, 5, 12, 12, func(int) bool { return true })
	toks := randTokens(r, n, 256)
	want, _, _ := m.ScoreRows(rows)
	wantG, _ := m.StepGraphs(toks, steps, []int{0, 1})
	errs := make(chan string, 16)
	done := make(chan struct{})
	for g := 0; g < 6; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			if g%2 == 0 {
				got, _, err := m.ScoreRows(rows)
				if err != nil || got[1] != want[1] || got[len(got)-1] != want[len(want)-1] {
					errs <- "ScoreRows differs under concurrency"
				}
				return
			}
			got, err := m.StepGraphs(toks, steps, []int{0, 1})
			if err != nil || maxDiff(got[1].AA, wantG[1].AA) != 0 {
				errs <- "StepGraphs differs under concurrency"
			}
		}(g)
	}
	for g := 0; g < 6; g++ {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// llama3 rope scaling: high frequencies unchanged, low ones divided by the
// factor, the band between interpolated (Llama 3.1 parameters).
func TestLlama3RopeScaling(t *testing.T) {
	base := &config{HeadDim: 128, RopeTheta: 500000}
	if err := base.setRope(nil, "rope_scaling"); err != nil {
		t.Fatal(err)
	}
	c := &config{HeadDim: 128, RopeTheta: 500000}
	err := c.setRope(map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0}, "rope_scaling")
	if err != nil {
		t.Fatal(err)
	}
	var hi, lo, mid int
	for i, f := range base.invFreq {
		wave := 2 * math.Pi / float64(f)
		g := float64(c.invFreq[i])
		switch {
		case wave < 8192/4.0:
			hi++
			if g != float64(f) {
				t.Errorf("i=%d: high frequency changed %v → %v", i, f, g)
			}
		case wave > 8192:
			lo++
			if math.Abs(g-float64(f)/8) > 1e-6*float64(f) {
				t.Errorf("i=%d: low frequency %v → %v, want /8", i, f, g)
			}
		default:
			mid++
			if !(g < float64(f) && g > float64(f)/8) {
				t.Errorf("i=%d: medium frequency %v → %v not interpolated", i, f, g)
			}
		}
	}
	if hi == 0 || lo == 0 || mid == 0 {
		t.Fatalf("bands hi=%d mid=%d lo=%d", hi, mid, lo)
	}
	lin := &config{HeadDim: 8, RopeTheta: 10000}
	lin.setRope(map[string]any{"type": "linear", "factor": 2.0}, "rope_scaling")
	if lin.invFreq[0] != 0.5 {
		t.Fatalf("linear scaling: %v", lin.invFreq)
	}
}

// attendGroup gives exactly attendOne's numbers for each head.
func TestAttendGroupEqualsOne(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct{ heads, d, n int }{{2, 16, 300}, {3, 6, 50}, {2, 4, 1}, {1, 16, 20}} {
		q := make([]float32, c.heads*c.d)
		k := make([]float32, c.n*c.d)
		v := make([]float32, c.n*c.d)
		for _, a := range [][]float32{q, k, v} {
			for i := range a {
				a[i] = float32(r.NormFloat64())
			}
		}
		want := make([]float32, len(q))
		got := make([]float32, len(q))
		s := make([]float32, c.heads*c.n)
		for h := 0; h < c.heads; h++ {
			attendOne(want[h*c.d:(h+1)*c.d], q[h*c.d:(h+1)*c.d], k, v, s[:c.n], 0.3)
		}
		attendGroup(got, q, k, v, s, c.heads, 0.3)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%+v: element %d: %v, want %v", c, i, got[i], want[i])
			}
		}
	}
}

// Rows are scored with the logits divided by their temperature (0 means 1),
// as the rollout sampled. Rows of one call with different temperatures share
// the prefix forward pass (the key/value cache does not depend on the
// temperature) but not the log-probabilities.
func TestScoreRowsTemperature(t *testing.T) {
	cfg, ts, m := testModel(t, testArch{arch: "LlamaForCausalLM"}, 12)
	r := rand.New(rand.NewPCG(3, 4))
	ctx := randTokens(r, 20, cfg.Vocab)
	tgt := randTokens(r, 6, cfg.Vocab)
	temps := []float64{0, 1, 0.5, 1.7, 0.5}
	var rows []scorer.Row
	for i, temp := range temps {
		c := ctx
		if i == 4 {
			c = ctx[:15] // shares a prefix with the others, same temperature as row 2
		}
		rows = append(rows, scorer.Row{Context: c, Target: tgt, Span: [2]int{1, 5}, Temperature: temp})
	}
	shared, _, err := m.ScoreRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	naive, _, err := m.ScoreRowsNaive(rows)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		one, _, err := m.ScoreRows([]scorer.Row{row})
		if err != nil {
			t.Fatal(err)
		}
		if shared[i] != naive[i] || shared[i] != one[0] {
			t.Errorf("row %d (T=%v): shared %v, naive %v, alone %v", i, row.Temperature, shared[i], naive[i], one[0])
		}
		temp := row.Temperature
		if temp == 0 {
			temp = 1
		}
		if want := refScoreT(cfg, ts, row, temp); math.Abs(shared[i]-want) > 2e-5*math.Max(1, math.Abs(want)) {
			t.Errorf("row %d (T=%v): %v, float64 reference %v", i, row.Temperature, shared[i], want)
		}
	}
	if shared[0] != shared[1] {
		t.Errorf("T absent %v and T = 1 %v differ", shared[0], shared[1])
	}
	if shared[1] == shared[2] || shared[1] == shared[3] || shared[2] == shared[3] {
		t.Errorf("one sequence at T = 1, 0.5, 1.7 gave %v %v %v: the temperature was not applied per row", shared[1], shared[2], shared[3])
	}
	// A very high temperature flattens the distribution: S → −log V.
	hot, _, err := m.ScoreRows([]scorer.Row{{Context: ctx, Target: tgt, Span: [2]int{1, 5}, Temperature: 1e9}})
	if err != nil {
		t.Fatal(err)
	}
	if want := -math.Log(float64(cfg.Vocab)); math.Abs(hot[0]-want) > 1e-6 {
		t.Errorf("T = 1e9: S = %v, want −log V = %v", hot[0], want)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		for _, f := range []func([]scorer.Row) ([]float64, scorer.Usage, error){m.ScoreRows, m.ScoreRowsNaive} {
			_, _, err := f([]scorer.Row{rows[0], {Context: ctx, Target: tgt, Span: [2]int{0, 1}, Temperature: bad}})
			if err == nil || !strings.Contains(err.Error(), "row 1") || !strings.Contains(err.Error(), "temperature") {
				t.Errorf("temperature %v: err = %v, want an error naming row 1's temperature", bad, err)
			}
		}
	}
}
