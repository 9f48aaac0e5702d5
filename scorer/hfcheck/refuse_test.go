package hfcheck_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer/cpumodel"
)

// refusal is a config neither scorer implements, made by changing the
// config.json transformers wrote for one of the built models, and the field
// the refusal must name.
type refusal struct {
	name, base string
	change     func(c map[string]any)
	field      string
}

var refusals = []refusal{
	{"another architecture (Mistral)", "Llama-3.2-1B", func(c map[string]any) {
		c["architectures"], c["model_type"] = []string{"MistralForCausalLM"}, "mistral"
	}, `"architectures"`},
	{"another architecture (Gemma 2)", "Qwen3-8B", func(c map[string]any) {
		c["architectures"], c["model_type"] = []string{"Gemma2ForCausalLM"}, "gemma2"
	}, `"architectures"`},
	{"another model_type", "Llama-3.1-8B", func(c map[string]any) { c["model_type"] = "mistral" }, `"model_type"`},
	{"yarn RoPE (4.x rope_scaling)", "Qwen2.5-7B-Instruct", func(c map[string]any) {
		c["rope_scaling"] = map[string]any{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
	}, `"rope_scaling"`},
	{"dynamic RoPE (rope_parameters)", "Llama-3.2-1B", func(c map[string]any) {
		c["rope_parameters"] = map[string]any{"rope_type": "dynamic", "factor": 2.0, "rope_theta": 500000.0}
	}, `"rope_parameters"`},
	{"sliding window (4.x use_sliding_window)", "Qwen2.5-7B-Instruct", func(c map[string]any) {
		c["use_sliding_window"], c["sliding_window"], c["max_window_layers"] = true, 64, 1
	}, `"use_sliding_window"`},
	{"sliding window (layer_types)", "Qwen2.5-0.5B-Instruct", func(c map[string]any) {
		c["use_sliding_window"], c["sliding_window"] = true, 64
		c["layer_types"] = []string{"full_attention", "sliding_attention", "sliding_attention"}
	}, `"layer_types"`},
	{"quantized checkpoint", "Qwen3-0.6B", func(c map[string]any) {
		c["quantization_config"] = map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true}
	}, `"quantization_config"`},
}

// refusedFolder writes the changed config next to a link to the model's
// weights and returns the folder.
func refusedFolder(t *testing.T, f *fixture, r refusal) string {
	t.Helper()
	m := f.model(t, r.base)
	b, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	r.change(c)
	dir := filepath.Join(t.TempDir(), r.base)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(m.Dir, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGoScorerRefuses: cpumodel.Load (creditflow score, attention, scorer)
// refuses each config, naming the field.
func TestGoScorerRefuses(t *testing.T) {
	f := getFixture(t)
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			_, err := cpumodel.Load(refusedFolder(t, f, r))
			if err == nil || !strings.Contains(err.Error(), r.field) {
				t.Fatalf("load: %v, want a refusal naming %s", err, r.field)
			}
			t.Logf("%v", err)
		})
	}
}

// podRefuses hot-loads each refused folder into a running pod: a 400 whose
// message names the field, and the pod keeps serving.
func podRefuses(t *testing.T, f *fixture, url string) {
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			status, eb := postLoad(t, url, refusedFolder(t, f, r))
			if status != 400 || !strings.Contains(eb.Error, r.field) {
				t.Fatalf("pod load: status %d %+v, want 400 naming %s", status, eb, r.field)
			}
			t.Logf("%s", eb.Error)
		})
	}
}
