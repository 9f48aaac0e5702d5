package pod_test

// Qwen2 and Qwen3 checkpoints written for the pod tests (package cpumodel
// exports only WriteTiny).

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// writeQwen writes a small random Qwen2 (q/k/v biases, tied, F32) or Qwen3
// (q/k norms, untied, BF16) checkpoint.
func writeQwen(t *testing.T, dir, arch string, seed int64) {
	t.Helper()
	const (
		hidden, layers, heads, kv, hd, inter, vocab = 64, 2, 4, 2, 16, 96, 300
	)
	tied := arch == "Qwen2ForCausalLM"
	cfg := map[string]any{
		"architectures": []string{arch}, "hidden_size": hidden, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter,
		"vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
		"tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "float32",
	}
	r := rand.New(rand.NewSource(seed))
	var ts []safetensors.Tensor
	mat := func(name string, out, in int, a float64) {
		d := make([]float32, out*in)
		for i := range d {
			d[i] = float32((2*r.Float64() - 1) * a)
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: []int{out, in}, Data: d})
	}
	vec := func(name string, n int, center, a float64) {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(center + (2*r.Float64()-1)*a)
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: []int{n}, Data: d})
	}
	unit := func(in int) float64 { return math.Sqrt(3 / float64(in)) }
	mat("model.embed_tokens.weight", vocab, hidden, 1)
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		vec(p+"input_layernorm.weight", hidden, 1, 0.2)
		mat(p+"self_attn.q_proj.weight", heads*hd, hidden, 2*unit(hidden))
		mat(p+"self_attn.k_proj.weight", kv*hd, hidden, 2*unit(hidden))
		mat(p+"self_attn.v_proj.weight", kv*hd, hidden, unit(hidden))
		mat(p+"self_attn.o_proj.weight", hidden, heads*hd, unit(heads*hd))
		if arch == "Qwen2ForCausalLM" {
			vec(p+"self_attn.q_proj.bias", heads*hd, 0, 0.3)
			vec(p+"self_attn.k_proj.bias", kv*hd, 0, 0.3)
			vec(p+"self_attn.v_proj.bias", kv*hd, 0, 0.3)
		} else {
			vec(p+"self_attn.q_norm.weight", hd, 1, 0.3)
			vec(p+"self_attn.k_norm.weight", hd, 1, 0.3)
		}
		vec(p+"post_attention_layernorm.weight", hidden, 1, 0.2)
		mat(p+"mlp.gate_proj.weight", inter, hidden, unit(hidden))
		mat(p+"mlp.up_proj.weight", inter, hidden, unit(hidden))
		mat(p+"mlp.down_proj.weight", hidden, inter, unit(inter))
	}
	vec("model.norm.weight", hidden, 1, 0.2)
	if !tied {
		mat("lm_head.weight", vocab, hidden, 1.5*unit(hidden))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	dtype := "F32"
	if !tied {
		dtype = "BF16"
	}
	// Two shards, as large checkpoints come.
	half := len(ts) / 2
	if err := safetensors.Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), dtype, ts[:half]); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), dtype, ts[half:]); err != nil {
		t.Fatal(err)
	}
}
