package cpumodel

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// config is the part of a Hugging Face config.json the network needs.
type config struct {
	Architecture  string
	Hidden        int
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int
	Intermediate  int
	Vocab         int
	MaxPositions  int
	RMSNormEps    float64
	RopeTheta     float64
	TieEmbeddings bool
	AttentionBias bool // Llama attention_bias: q, k, v and o biases
	QKVBias       bool // Qwen2: q, k, v biases only
	QKNorm        bool // Qwen3: per-head RMSNorm on q and k before RoPE
	MLPBias       bool // Llama mlp_bias
	MaxContext    int  // max_position_embeddings (or less: WithMaxContext)
	invFreq       []float32
}

type hfConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	IntermediateSize      int             `json:"intermediate_size"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           map[string]any  `json:"rope_scaling"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
	SlidingWindow         json.RawMessage `json:"sliding_window"`
	MaxWindowLayers       *int            `json:"max_window_layers"`
	LayerTypes            []string        `json:"layer_types"`
	RopeParameters        map[string]any  `json:"rope_parameters"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	QuantizationConfig    json.RawMessage `json:"quantization_config"`
}

// modelTypes is the model_type of each supported architecture.
var modelTypes = map[string]string{
	"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
}

// readConfig parses and validates dir/config.json.
func readConfig(dir string) (*config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading model config: %w (a model folder needs config.json and *.safetensors)", err)
	}
	return parseConfig(path, b)
}

// parseConfig parses and validates the bytes of a config.json read from path.
func parseConfig(path string, b []byte) (*config, error) {
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: not valid JSON: %v", path, err)
	}
	c, err := h.toConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (h *hfConfig) toConfig() (*config, error) {
	if len(h.Architectures) != 1 {
		return nil, fmt.Errorf("field \"architectures\" must name exactly one architecture, got %v", h.Architectures)
	}
	c := &config{
		Architecture:  h.Architectures[0],
		Hidden:        h.HiddenSize,
		Layers:        h.NumHiddenLayers,
		Heads:         h.NumAttentionHeads,
		Intermediate:  h.IntermediateSize,
		Vocab:         h.VocabSize,
		MaxPositions:  h.MaxPositionEmbeddings,
		RMSNormEps:    1e-6,
		RopeTheta:     10000,
		TieEmbeddings: false, // LlamaConfig, Qwen2Config and Qwen3Config default
	}
	switch c.Architecture {
	case "LlamaForCausalLM":
		c.AttentionBias = h.AttentionBias
		c.MLPBias = h.MLPBias // Qwen2's and Qwen3's MLPs have no biases, whatever mlp_bias says (as in transformers)
	case "Qwen2ForCausalLM":
		c.QKVBias = true
	case "Qwen3ForCausalLM":
		c.AttentionBias = h.AttentionBias
		c.QKNorm = true
	default:
		return nil, fmt.Errorf("field \"architectures\": %q is not supported (want LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM)", c.Architecture)
	}
	if want := modelTypes[c.Architecture]; h.ModelType != "" && h.ModelType != want {
		return nil, fmt.Errorf("field \"model_type\": %q is not supported with %s (want %q)", h.ModelType, c.Architecture, want)
	}
	if q := h.QuantizationConfig; len(q) > 0 && string(q) != "null" {
		return nil, fmt.Errorf("field \"quantization_config\": quantized checkpoints are not supported (the scorers read float32, float16 or bfloat16 weights)")
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return nil, fmt.Errorf("field \"hidden_act\": %q is not supported (want silu)", h.HiddenAct)
	}
	c.KVHeads = c.Heads
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if h.HeadDim != nil && *h.HeadDim > 0 {
		c.HeadDim = *h.HeadDim
	}
	if h.RMSNormEps != nil {
		c.RMSNormEps = *h.RMSNormEps
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if h.TieWordEmbeddings != nil {
		c.TieEmbeddings = *h.TieWordEmbeddings
	}
	// RoPE: transformers 4 writes rope_theta and rope_scaling, transformers 5
	// rope_parameters (with rope_theta inside).
	scaling, ropeField := h.RopeScaling, "rope_scaling"
	if scaling == nil && h.RopeParameters != nil {
		scaling, ropeField = h.RopeParameters, "rope_parameters"
		for k, v := range h.RopeParameters {
			if _, nested := v.(map[string]any); nested {
				return nil, fmt.Errorf("field \"rope_parameters\": per-layer-type parameters (%q) are not supported", k)
			}
		}
		if th, ok := h.RopeParameters["rope_theta"].(float64); ok && h.RopeTheta == nil {
			c.RopeTheta = th
		}
	}
	prf := h.PartialRotaryFactor
	if v, ok := scaling["partial_rotary_factor"].(float64); ok {
		prf = &v
	}
	if prf != nil && *prf != 1 {
		return nil, fmt.Errorf("field \"partial_rotary_factor\": %v is not supported (rotary embeddings on the whole head only)", *prf)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.Hidden}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads},
		{"num_key_value_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"intermediate_size", c.Intermediate},
		{"vocab_size", c.Vocab}, {"max_position_embeddings", c.MaxPositions},
	} {
		if f.v <= 0 {
			return nil, fmt.Errorf("field %q must be a positive integer, got %d", f.name, f.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("field \"num_attention_heads\" (%d) must be a multiple of \"num_key_value_heads\" (%d)", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("field \"head_dim\" must be even for rotary embeddings, got %d", c.HeadDim)
	}
	if !(c.RopeTheta > 0) {
		return nil, fmt.Errorf("field \"rope_theta\" must be positive, got %v", c.RopeTheta)
	}
	c.MaxContext = c.MaxPositions
	if err := h.checkFullAttention(c); err != nil {
		return nil, err
	}
	if err := c.setRope(scaling, ropeField); err != nil {
		return nil, err
	}
	return c, nil
}

// checkFullAttention refuses a config with sliding-window attention on any
// layer: the scorers attend over the whole context. transformers 5 writes
// layer_types; 4.x-era Qwen2 and Qwen3 configs slide layers from
// max_window_layers on (default 28) when use_sliding_window is set, over
// sliding_window tokens (default 4096). A window that covers every position
// (sliding_window ≥ max_position_embeddings) changes nothing and is accepted.
func (h *hfConfig) checkFullAttention(c *config) error {
	window := -1 // none
	if sw := h.SlidingWindow; len(sw) > 0 && string(sw) != "null" {
		if err := json.Unmarshal(sw, &window); err != nil {
			return fmt.Errorf("field \"sliding_window\" must be an integer or null, got %s", sw)
		}
	} else if len(sw) == 0 && c.Architecture != "LlamaForCausalLM" {
		window = 4096 // Qwen2Config and Qwen3Config default
	}
	covers := window < 0 || window >= c.MaxPositions
	for i, lt := range h.LayerTypes {
		switch lt {
		case "full_attention":
		case "sliding_attention":
			if !covers {
				return fmt.Errorf("field \"layer_types\": layer %d is sliding_attention over %d tokens; sliding-window attention is not supported", i, window)
			}
		default:
			return fmt.Errorf("field \"layer_types\": layer %d is %q; only full_attention is supported", i, lt)
		}
	}
	if h.LayerTypes != nil || !h.UseSlidingWindow || c.Architecture == "LlamaForCausalLM" || covers {
		return nil
	}
	from := 28
	if h.MaxWindowLayers != nil {
		from = *h.MaxWindowLayers
	}
	if from < c.Layers {
		return fmt.Errorf("field \"use_sliding_window\": layers %d and up attend over a sliding window of %d tokens (sliding_window, max_window_layers); sliding-window attention is not supported", from, window)
	}
	return nil
}

// setRope computes the rotary inverse frequencies as Hugging Face does (in
// float32), applying a supported rope scaling read from the named field
// (rope_scaling or rope_parameters).
func (c *config) setRope(scaling map[string]any, field string) error {
	d := c.HeadDim
	inv := make([]float32, d/2)
	for i := range inv {
		e := float32(2*i) / float32(d)
		inv[i] = float32(1 / math.Pow(c.RopeTheta, float64(e)))
	}
	typ := ""
	if scaling != nil {
		if t, ok := scaling["rope_type"].(string); ok {
			typ = t
		} else if t, ok := scaling["type"].(string); ok {
			typ = t
		}
	}
	num := func(k string) (float64, error) {
		v, ok := scaling[k].(float64)
		if !ok {
			return 0, fmt.Errorf("field %q: %q must be a number for rope_type %q", field, k, typ)
		}
		return v, nil
	}
	switch typ {
	case "", "default":
	case "linear":
		f, err := num("factor")
		if err != nil {
			return err
		}
		for i := range inv {
			inv[i] = float32(float64(inv[i]) / f)
		}
	case "llama3":
		factor, err := num("factor")
		if err != nil {
			return err
		}
		lo, err := num("low_freq_factor")
		if err != nil {
			return err
		}
		hi, err := num("high_freq_factor")
		if err != nil {
			return err
		}
		old, err := num("original_max_position_embeddings")
		if err != nil {
			return err
		}
		loWave, hiWave := old/lo, old/hi
		for i, f := range inv {
			wave := 2 * math.Pi / float64(f)
			v := float64(f)
			if wave > loWave {
				v = float64(f) / factor
			}
			if !(wave < hiWave) && !(wave > loWave) {
				s := (old/wave - lo) / (hi - lo)
				v = (1-s)*v/factor + s*v
			}
			inv[i] = float32(v)
		}
	default:
		return fmt.Errorf("field %q: rope_type %q is not supported (want default, linear or llama3)", field, typ)
	}
	c.invFreq = inv
	return nil
}

// toHF renders the config as a Hugging Face config.json object.
func (c *config) toHF() map[string]any {
	m := map[string]any{
		"architectures":           []string{c.Architecture},
		"hidden_size":             c.Hidden,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"intermediate_size":       c.Intermediate,
		"vocab_size":              c.Vocab,
		"max_position_embeddings": c.MaxPositions,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"tie_word_embeddings":     c.TieEmbeddings,
		"hidden_act":              "silu",
		"torch_dtype":             "float32",
	}
	switch c.Architecture {
	case "LlamaForCausalLM":
		m["model_type"] = "llama"
		m["attention_bias"] = c.AttentionBias
		m["mlp_bias"] = c.MLPBias
	case "Qwen2ForCausalLM":
		m["model_type"] = "qwen2"
	case "Qwen3ForCausalLM":
		m["model_type"] = "qwen3"
		m["attention_bias"] = c.AttentionBias
	}
	return m
}
