package cpumodel

import (
	"fmt"
	"math"
	"slices"

	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// tinyConfig is the built-in model's configuration.
func tinyConfig() *config {
	h := &hfConfig{
		Architectures:         []string{"LlamaForCausalLM"},
		HiddenSize:            64,
		NumHiddenLayers:       2,
		NumAttentionHeads:     2,
		NumKeyValueHeads:      ptr(1),
		HeadDim:               ptr(16),
		IntermediateSize:      128,
		VocabSize:             TinyVocab,
		MaxPositionEmbeddings: 32768,
		RMSNormEps:            ptr(1e-5),
		RopeTheta:             ptr(10000.0),
		TieWordEmbeddings:     ptr(false),
		HiddenAct:             "silu",
	}
	c, err := h.toConfig()
	if err != nil {
		panic("model: built-in tiny config is invalid: " + err.Error()) // a programming error, covered by tests
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// Token ids of the tiny model: bytes 0..255 are themselves, then specials.
const (
	TinyBOS    = 256
	TinyEOS    = 257
	TinyPad    = 258
	TinyDelete = 259 // "[DELETE]", the placeholder
	TinyVocab  = 260
	tinySeed   = 0x6372656469746677 // "creditfw"
)

// splitmix64 is a small PRNG with a fixed, documented algorithm, so the tiny
// weights are the same on every machine and Go version.
type splitmix64 struct{ s uint64 }

func (r *splitmix64) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform returns a float32 in [-a, a).
func (r *splitmix64) uniform(a float64) float32 {
	u := float64(r.next()>>11) / (1 << 53)
	return float32((2*u - 1) * a)
}

// tinyTensors generates the tiny model's weights in a fixed order.
func tinyTensors() (*config, []safetensors.Tensor) {
	cfg := tinyConfig()
	rng := &splitmix64{s: tinySeed}
	var ts []safetensors.Tensor
	mat := func(name string, out, in int, a float64) {
		w := make([]float32, out*in)
		for i := range w {
			w[i] = rng.uniform(a)
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: []int{out, in}, Data: w})
	}
	vec := func(name string, n int, center, a float64) {
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(center) + rng.uniform(a)
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: []int{n}, Data: w})
	}
	h, d := cfg.Hidden, cfg.HeadDim
	unit := func(in int) float64 { return math.Sqrt(3 / float64(in)) }
	mat("model.embed_tokens.weight", cfg.Vocab, h, 1.0)
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		vec(p+"input_layernorm.weight", h, 1, 0.2)
		mat(p+"self_attn.q_proj.weight", cfg.Heads*d, h, 2*unit(h))
		mat(p+"self_attn.k_proj.weight", cfg.KVHeads*d, h, 2*unit(h))
		mat(p+"self_attn.v_proj.weight", cfg.KVHeads*d, h, unit(h))
		mat(p+"self_attn.o_proj.weight", h, cfg.Heads*d, unit(cfg.Heads*d))
		vec(p+"post_attention_layernorm.weight", h, 1, 0.2)
		mat(p+"mlp.gate_proj.weight", cfg.Intermediate, h, unit(h))
		mat(p+"mlp.up_proj.weight", cfg.Intermediate, h, unit(h))
		mat(p+"mlp.down_proj.weight", h, cfg.Intermediate, unit(cfg.Intermediate))
	}
	vec("model.norm.weight", h, 1, 0.2)
	mat("lm_head.weight", cfg.Vocab, h, 1.5*unit(h))
	return cfg, ts
}

// fromTensors builds a model from in-memory tensors.
func fromTensors(cfg *config, ts []safetensors.Tensor) (*Model, error) {
	byName := map[string]safetensors.Tensor{}
	for _, t := range ts {
		byName[t.Name] = t
	}
	get := func(name string, shape ...int) ([]float32, error) {
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is missing", name)
		}
		if !slices.Equal(t.Shape, shape) {
			return nil, fmt.Errorf("tensor %q has shape %v, the config needs %v", name, t.Shape, shape)
		}
		return t.Data, nil
	}
	has := func(name string) bool { _, ok := byName[name]; return ok }
	return build(cfg, get, has)
}

// TinyRandom returns the built-in random-weight model: a 2-layer Llama
// (hidden 64, 2 query heads sharing 1 KV head, head_dim 16, SwiGLU 128) over
// the tiny byte-level vocabulary, with weights drawn from a fixed seed: the
// same numbers on every machine. It knows nothing; tests that want numbers
// independent of training, and measurements that want a baseline, use it.
func TinyRandom() *Model {
	cfg, ts := tinyTensors()
	m, err := fromTensors(cfg, ts)
	if err != nil {
		panic("model: built-in tiny model is invalid: " + err.Error()) // a programming error, covered by tests
	}
	m.name = TinyRandomName
	m.placeholder = []int32{TinyDelete}
	return m
}

// TinyTokens tokenizes text for the tiny model: one token per byte.
func TinyTokens(text string) []int32 {
	out := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		out[i] = int32(text[i])
	}
	return out
}

// WriteTinyRandom writes the random-weight model to dir as config.json and
// model.safetensors (F32) plus a tokenizer.json naming the placeholder, so
// Load(dir) gives exactly the numbers of TinyRandom().
func WriteTinyRandom(dir string) error {
	cfg, ts := tinyTensors()
	return writeModel(dir, cfg, ts, "F32")
}
