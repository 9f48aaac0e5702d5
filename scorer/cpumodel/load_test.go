package cpumodel

// Loading checkpoints: safetensors (float32, half precision, sharded,
// malformed) and config.json.

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

func TestWriteTinyLoadsSameNumbers(t *testing.T) {
	for name, f := range map[string]struct {
		write func(string) error
		m     func() *Model
	}{"tiny": {WriteTiny, Tiny}, "tiny-random": {WriteTinyRandom, TinyRandom}} {
		t.Run(name, func(t *testing.T) { testWriteLoads(t, f.write, f.m) })
	}
}

func testWriteLoads(t *testing.T, write func(string) error, builtin func() *Model) {
	dir := t.TempDir()
	if err := write(dir); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Info().PlaceholderIDs; len(got) != 1 || got[0] != TinyDelete {
		t.Fatalf("placeholder from tokenizer.json: %v", got)
	}
	mo, err := LoadWith(dir, WithPlaceholderIDs([]int32{91, 68}), WithName("tiny-copy"))
	if err != nil || mo.Info().Name != "tiny-copy" || len(mo.Info().PlaceholderIDs) != 2 || mo.Info().PlaceholderIDs[1] != 68 {
		t.Fatalf("LoadWith: %v %+v", err, mo)
	}
	if _, err := LoadWith(dir, WithPlaceholderIDs([]int32{TinyVocab})); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("placeholder outside the vocabulary: %v", err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	rows := searchRows(r, 256, TinyDelete)
	a, _, _ := builtin().ScoreRows(rows)
	b, _, err := m.ScoreRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d: Tiny %v, loaded %v", i, a[i], b[i])
		}
	}
}

// F16 and BF16 checkpoints load to exactly the rounded weights and stay close
// to the F32 model.
func TestLoadHalfPrecision(t *testing.T) {
	cfg, ts, m32 := testModel(t, testArch{arch: "Qwen2ForCausalLM"}, 21)
	row := scorer.Row{Context: []int32{1, 5, 2, 8, 3, 3, 9, 12}, Target: []int32{4, 6, 1, 0, 7}, Span: [2]int{1, 5}}
	want, _, _ := m32.ScoreRows([]scorer.Row{row})
	for _, c := range []struct {
		dtype string
		round func(float32) float32
		tol   float64
	}{
		{"F16", func(f float32) float32 { return safetensors.Round("F16", f) }, 0.02},
		{"BF16", func(f float32) float32 { return safetensors.Round("BF16", f) }, 0.1},
	} {
		dir := t.TempDir()
		if err := writeModel(dir, cfg, ts, c.dtype); err != nil {
			t.Fatal(err)
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", c.dtype, err)
		}
		rounded := make([]safetensors.Tensor, len(ts))
		for i, x := range ts {
			d := make([]float32, len(x.Data))
			for j, v := range x.Data {
				d[j] = c.round(v)
			}
			rounded[i] = safetensors.Tensor{Name: x.Name, Shape: x.Shape, Data: d}
		}
		mr, _ := fromTensors(cfg, rounded)
		got, _, _ := m.ScoreRows([]scorer.Row{row})
		exact, _, _ := mr.ScoreRows([]scorer.Row{row})
		if got[0] != exact[0] {
			t.Errorf("%s: loaded %v, in-memory rounded weights %v", c.dtype, got[0], exact[0])
		}
		if math.Abs(got[0]-want[0]) > c.tol*math.Max(1, math.Abs(want[0])) {
			t.Errorf("%s: %v, F32 %v", c.dtype, got[0], want[0])
		}
	}
}

// Weights split over several files (with an index file) load.
func TestLoadShardedFiles(t *testing.T) {
	cfg, ts, m := testModel(t, testArch{arch: "LlamaForCausalLM"}, 4)
	dir := t.TempDir()
	if err := writeModel(dir, cfg, ts[:5], "F32"); err != nil {
		t.Fatal(err)
	}
	os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
	if err := safetensors.Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), "BF16", ts[5:]); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":{}}`), 0o644)
	ms, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Info().Layers != m.Info().Layers || ms.Info().Architecture != "LlamaForCausalLM" {
		t.Fatalf("info %+v", ms.Info())
	}
	// The same tensor in two files is an error.
	safetensors.Write(filepath.Join(dir, "extra.safetensors"), "F32", ts[:1])
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), ts[0].Name) {
		t.Fatalf("duplicate tensor: %v", err)
	}
}

func TestMalformedSafetensors(t *testing.T) {
	cfg, ts, _ := testModel(t, testArch{arch: "LlamaForCausalLM"}, 4)
	good := t.TempDir()
	if err := writeModel(good, cfg, ts, "F32"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(good, "model.safetensors"))
	hlen := binary.LittleEndian.Uint64(raw)
	header := string(raw[8 : 8+hlen])
	withHeader := func(h string) []byte {
		for len(h)%8 != 0 {
			h += " "
		}
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(b, h...), raw[8+hlen:]...)
	}
	cases := map[string]struct {
		data []byte
		want []string
	}{
		"truncated data":    {raw[:len(raw)-10], []string{"outside the data section"}},
		"too short":         {raw[:5], []string{"too short"}},
		"header too big":    {append(binary.LittleEndian.AppendUint64(nil, 1<<40), raw[8:]...), []string{"header length"}},
		"not json":          {withHeader("{nope"), []string{"not a JSON object"}},
		"unknown dtype":     {withHeader(strings.Replace(header, `"F32"`, `"F17"`, 1)), []string{"unknown dtype", "F17"}},
		"missing tensor":    {withHeader(strings.Replace(header, `"model.norm.weight"`, `"model.nrm.weight"`, 1)), []string{"model.norm.weight", "missing"}},
		"bad offsets":       {withHeader(strings.Replace(header, `"data_offsets":[0,`, `"data_offsets":[4,`, 1)), []string{"data_offsets"}},
		"wrong shape":       {withHeader(strings.Replace(header, `"shape":[13,16]`, `"shape":[16,13]`, 1)), []string{"lm_head.weight", "shape"}},
		"int dtype as data": {withHeader(strings.Replace(header, `"model.norm.weight":{"dtype":"F32"`, `"model.norm.weight":{"dtype":"I32"`, 1)), []string{"model.norm.weight", "I32"}},
	}
	for name, c := range cases {
		dir := t.TempDir()
		cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
		os.WriteFile(filepath.Join(dir, "model.safetensors"), c.data, 0o644)
		_, err := Load(dir)
		if err == nil {
			t.Errorf("%s: loaded without error", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", name, err, w)
			}
		}
		if name != "missing tensor" && !strings.Contains(err.Error(), "model.safetensors") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
	}
	// Overlapping tensors: point one norm at another norm's bytes.
	var hm map[string]any
	if err := json.Unmarshal([]byte(header), &hm); err != nil {
		t.Fatal(err)
	}
	hm["model.norm.weight"].(map[string]any)["data_offsets"] = hm["model.layers.0.input_layernorm.weight"].(map[string]any)["data_offsets"]
	hb, _ := json.Marshal(hm)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.safetensors"), withHeader(string(hb)), 0o644)
	if _, err := safetensors.OpenFile(filepath.Join(dir, "x.safetensors")); err == nil || !strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), "x.safetensors") {
		t.Fatalf("overlap: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4,"vocab_size":5,"max_position_embeddings":16`
	for name, c := range map[string]struct{ json, want string }{
		"arch":        {`{"architectures":["GPT2LMHeadModel"],` + base + `}`, "GPT2LMHeadModel"},
		"act":         {`{"architectures":["LlamaForCausalLM"],"hidden_act":"gelu",` + base + `}`, "hidden_act"},
		"rope":        {`{"architectures":["LlamaForCausalLM"],"rope_scaling":{"rope_type":"yarn","factor":4},` + base + `}`, "rope_scaling"},
		"kv heads":    {`{"architectures":["LlamaForCausalLM"],"num_key_value_heads":3,` + base + `}`, "num_key_value_heads"},
		"zero hidden": {`{"architectures":["LlamaForCausalLM"],"hidden_size":0,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":4,"vocab_size":5,"max_position_embeddings":16}`, "hidden_size"},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.json), 0o644)
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %q", name, err, c.want)
		}
	}
}

// TestConfigForms reads the config.json fields of both generations of
// transformers: 4.x-era files (rope_theta, rope_scaling, torch_dtype) and
// what transformers 5 writes (rope_parameters holding rope_theta, dtype,
// layer_types), to the same configuration; and refuses what neither scorer
// implements, naming the field.
func TestConfigForms(t *testing.T) {
	base := `"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"intermediate_size":4,"vocab_size":5,"max_position_embeddings":131072`
	parse := func(js string) (*config, error) { return parseConfig("config.json", []byte(js)) }
	v4, err := parse(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","torch_dtype":"bfloat16","rope_theta":500000.0,` +
		`"rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},` + base + `}`)
	if err != nil {
		t.Fatal(err)
	}
	v5, err := parse(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","dtype":"bfloat16",` +
		`"rope_parameters":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_theta":500000.0,"rope_type":"llama3"},` + base + `}`)
	if err != nil {
		t.Fatal(err)
	}
	if v4.RopeTheta != 500000 || v5.RopeTheta != 500000 || !slices.Equal(v4.invFreq, v5.invFreq) {
		t.Errorf("4.x and 5 forms differ: theta %v / %v, inv_freq %v / %v", v4.RopeTheta, v5.RopeTheta, v4.invFreq, v5.invFreq)
	}
	// Qwen2 as transformers 5 writes it: layer_types all full, the window off.
	q5, err := parse(`{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","layer_types":["full_attention","full_attention"],` +
		`"use_sliding_window":false,"sliding_window":null,"max_window_layers":21,"rope_parameters":{"rope_theta":1000000.0,"rope_type":"default"},` + base + `}`)
	if err != nil || q5.RopeTheta != 1e6 || q5.MaxContext != 131072 {
		t.Fatalf("qwen2 (transformers 5): %v %+v", err, q5)
	}
	// 4.x Qwen2 with the window on but no layer past max_window_layers, or a
	// window covering every position: full attention, accepted.
	for _, js := range []string{
		`{"architectures":["Qwen2ForCausalLM"],"use_sliding_window":true,"sliding_window":64,"max_window_layers":2,` + base + `}`,
		`{"architectures":["Qwen2ForCausalLM"],"use_sliding_window":true,"sliding_window":131072,"max_window_layers":0,` + base + `}`,
		`{"architectures":["Qwen3ForCausalLM"],"layer_types":["sliding_attention","full_attention"],"sliding_window":null,` + base + `}`,
	} {
		if _, err := parse(js); err != nil {
			t.Errorf("%s: %v", js, err)
		}
	}
	for name, c := range map[string]struct{ json, want string }{
		"mistral":            {`{"architectures":["MistralForCausalLM"],"model_type":"mistral",` + base + `}`, `"architectures": "MistralForCausalLM"`},
		"gemma":              {`{"architectures":["Gemma2ForCausalLM"],"model_type":"gemma2",` + base + `}`, `"architectures": "Gemma2ForCausalLM"`},
		"model_type":         {`{"architectures":["LlamaForCausalLM"],"model_type":"mistral",` + base + `}`, `"model_type"`},
		"yarn (4.x)":         {`{"architectures":["Qwen2ForCausalLM"],"rope_scaling":{"type":"yarn","factor":4.0,"original_max_position_embeddings":32768},` + base + `}`, `"rope_scaling": rope_type "yarn"`},
		"dynamic (5)":        {`{"architectures":["LlamaForCausalLM"],"rope_parameters":{"rope_type":"dynamic","factor":2.0,"rope_theta":10000.0},` + base + `}`, `"rope_parameters": rope_type "dynamic"`},
		"per-layer rope":     {`{"architectures":["LlamaForCausalLM"],"rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":10000.0}},` + base + `}`, `"rope_parameters"`},
		"partial rotary":     {`{"architectures":["LlamaForCausalLM"],"partial_rotary_factor":0.5,` + base + `}`, `"partial_rotary_factor"`},
		"sliding (4.x)":      {`{"architectures":["Qwen2ForCausalLM"],"use_sliding_window":true,"sliding_window":64,"max_window_layers":1,` + base + `}`, `"use_sliding_window"`},
		"sliding default":    {`{"architectures":["Qwen3ForCausalLM"],"use_sliding_window":true,"max_window_layers":0,` + base + `}`, `"use_sliding_window"`},
		"sliding (5)":        {`{"architectures":["Qwen2ForCausalLM"],"layer_types":["full_attention","sliding_attention"],"sliding_window":64,` + base + `}`, `"layer_types": layer 1`},
		"unknown layer type": {`{"architectures":["Qwen3ForCausalLM"],"layer_types":["full_attention","linear_attention"],` + base + `}`, `"layer_types"`},
		"quantized":          {`{"architectures":["LlamaForCausalLM"],"quantization_config":{"quant_method":"gptq","bits":4},` + base + `}`, `"quantization_config"`},
		"bad sliding_window": {`{"architectures":["Qwen2ForCausalLM"],"use_sliding_window":true,"sliding_window":"64",` + base + `}`, `"sliding_window"`},
	} {
		_, err := parse(c.json)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %s", name, err, c.want)
		}
	}
}

// TestCapContext: a capped model cuts contexts from the left to fit the cap
// with their target, exactly as the uncapped model scores the cut row, and
// refuses longer attention jobs; the original is untouched.
func TestCapContext(t *testing.T) {
	full := TinyRandom()
	capped := full.CapContext(50)
	if capped.Info().MaxContext != 50 || full.Info().MaxContext == 50 || full.CapContext(0) != full {
		t.Fatalf("infos %+v %+v", capped.Info(), full.Info())
	}
	r := rand.New(rand.NewPCG(5, 6))
	row := scorer.Row{Context: randTokens(r, 80, 256), Target: randTokens(r, 10, 256), Span: [2]int{2, 9}, Temperature: 0.7}
	cut := row
	cut.Context = row.Context[40:]
	got, u, err := capped.ScoreRows([]scorer.Row{row})
	if err != nil || u.Truncations != 1 {
		t.Fatalf("capped: %v, usage %+v", err, u)
	}
	want, _, err := full.ScoreRows([]scorer.Row{cut})
	if err != nil || got[0] != want[0] {
		t.Fatalf("capped %v, uncapped on the cut row %v (%v)", got, want, err)
	}
	if _, err := capped.StepGraphs(randTokens(r, 60, 256), []scorer.Step{{Action: [2]int{10, 20}}}, []int{0}); err == nil || !strings.Contains(err.Error(), "context of 50") {
		t.Fatalf("60-token job on a 50-token cap: %v", err)
	}
}
