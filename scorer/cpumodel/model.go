package cpumodel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// linear is a dense layer y = W x + b with W stored row-major [out][in].
type linear struct {
	w       []float32
	b       []float32 // nil when the layer has no bias
	in, out int
}

type layer struct {
	inNorm, postNorm []float32
	q, k, v, o       linear
	qNorm, kNorm     []float32 // Qwen3 per-head norms, nil otherwise
	gate, up, down   linear
}

// Model is a loaded network. It is immutable after construction and safe for
// concurrent use by many goroutines: every call allocates its own caches.
type Model struct {
	cfg         *config
	name        string
	placeholder []int32
	embed       []float32 // [vocab][hidden]
	layers      []layer
	norm        []float32
	lmHead      []float32 // [vocab][hidden]; aliases embed when tied
}

// Option configures LoadWith.
type Option func(*loadOptions)

type loadOptions struct {
	placeholder []int32
	name        string
	maxContext  int
}

// WithPlaceholderIDs sets the token ids of "[DELETE]" for the checkpoint's
// tokenizer (docs/method.md §2.1). Without it Load looks for "[DELETE]" as a single token
// in the folder's tokenizer.json and otherwise reports no placeholder ids.
func WithPlaceholderIDs(ids []int32) Option {
	return func(o *loadOptions) { o.placeholder = append([]int32(nil), ids...) }
}

// WithMaxContext caps the context the model is run on at n tokens (when n is
// positive and below max_position_embeddings): a row's context is then cut
// from the left to fit n with its target, as at the model's own limit, and
// longer attention jobs are refused. Info().MaxContext reports the cap.
func WithMaxContext(n int) Option { return func(o *loadOptions) { o.maxContext = n } }

// CapContext returns m capped at a context of n tokens, sharing its weights
// (m itself when n is not positive or not below its context; see
// WithMaxContext).
func (m *Model) CapContext(n int) *Model {
	if n <= 0 || n >= m.cfg.MaxContext {
		return m
	}
	c, cfg := *m, *m.cfg
	cfg.MaxContext = n
	c.cfg = &cfg
	return &c
}

// WithName sets Info().Name (default: the folder's base name).
func WithName(name string) Option { return func(o *loadOptions) { o.name = name } }

// Info describes the model.
func (m *Model) Info() Info {
	return Info{
		Name:           m.name,
		Architecture:   m.cfg.Architecture,
		Layers:         m.cfg.Layers,
		VocabSize:      m.cfg.Vocab,
		MaxContext:     m.cfg.MaxContext,
		PlaceholderIDs: append([]int32(nil), m.placeholder...),
	}
}

// Load reads a Hugging Face model folder: config.json plus one or more
// *.safetensors files (F32, F16 or BF16; an index file is not needed). It
// returns an error naming the field, file or tensor for anything it cannot use.
// The placeholder ids come from "[DELETE]" in the folder's tokenizer.json when
// it is one token there; LoadWith sets them explicitly.
func Load(dir string) (*Model, error) { return LoadWith(dir) }

// LoadWith is Load with options.
func LoadWith(dir string, opts ...Option) (*Model, error) {
	var o loadOptions
	for _, f := range opts {
		f(&o)
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	ts, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := build(cfg, ts.Load, ts.Has)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", dir, err)
	}
	m = m.CapContext(o.maxContext)
	m.name = o.name
	if m.name == "" {
		abs, _ := filepath.Abs(dir)
		m.name = filepath.Base(abs)
	}
	m.placeholder = o.placeholder
	if m.placeholder == nil {
		m.placeholder = findPlaceholder(dir)
	}
	for _, id := range m.placeholder {
		if id < 0 || int(id) >= cfg.Vocab {
			return nil, fmt.Errorf("model %s: placeholder id %d outside the vocabulary [0, %d)", dir, id, cfg.Vocab)
		}
	}
	return m, nil
}

// findPlaceholder looks for "[DELETE]" as one token in tokenizer.json.
func findPlaceholder(dir string) []int32 {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil
	}
	var t struct {
		Added []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Model struct {
			Vocab map[string]int32 `json:"vocab"`
		} `json:"model"`
	}
	if json.Unmarshal(b, &t) != nil {
		return nil
	}
	for _, a := range t.Added {
		if a.Content == "[DELETE]" {
			return []int32{a.ID}
		}
	}
	if id, ok := t.Model.Vocab["[DELETE]"]; ok {
		return []int32{id}
	}
	return nil
}

// loadEmbeddings reads the input embeddings and the output head as
// transformers 5 ties them at load: an untied config needs lm_head.weight; a
// tied one uses the embeddings as the head, except where the file also holds
// an lm_head.weight that differs from them (transformers then keeps both,
// untied, and warns that the config is wrong) and where the file holds only
// lm_head.weight (the embeddings are then tied to it).
func (m *Model) loadEmbeddings(cfg *config, get func(name string, shape ...int) ([]float32, error), has func(string) bool) error {
	const embed, head = "model.embed_tokens.weight", "lm_head.weight"
	h := cfg.Hidden
	var err error
	if cfg.TieEmbeddings && !has(embed) && has(head) {
		if m.embed, err = get(head, cfg.Vocab, h); err != nil {
			return err
		}
		m.lmHead = m.embed
		return nil
	}
	if m.embed, err = get(embed, cfg.Vocab, h); err != nil {
		return err
	}
	switch {
	case has(head):
		if m.lmHead, err = get(head, cfg.Vocab, h); err != nil {
			return err
		}
		if cfg.TieEmbeddings {
			if slices.Equal(m.lmHead, m.embed) {
				m.lmHead = m.embed // one copy, as tied
			} else {
				cfg.TieEmbeddings = false // the file's two tensors, as transformers loads them
			}
		}
	case cfg.TieEmbeddings:
		m.lmHead = m.embed
	default:
		return fmt.Errorf("tensor %q is missing and config says tie_word_embeddings=false", head)
	}
	return nil
}

// build assembles a model from named tensors (Hugging Face names).
func build(cfg *config, get func(name string, shape ...int) ([]float32, error), has func(string) bool) (*Model, error) {
	m := &Model{cfg: cfg}
	h, d := cfg.Hidden, cfg.HeadDim
	var err error
	if err = m.loadEmbeddings(cfg, get, has); err != nil {
		return nil, err
	}
	if m.norm, err = get("model.norm.weight", h); err != nil {
		return nil, err
	}
	lin := func(name string, in, out int, bias bool) (linear, error) {
		l := linear{in: in, out: out}
		var err error
		if l.w, err = get(name+".weight", out, in); err != nil {
			return l, err
		}
		if bias {
			if l.b, err = get(name+".bias", out); err != nil {
				return l, err
			}
		}
		return l, nil
	}
	qkvBias := cfg.AttentionBias || cfg.QKVBias
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		var L layer
		steps := []func() error{
			func() (e error) { L.inNorm, e = get(p+"input_layernorm.weight", h); return },
			func() (e error) { L.postNorm, e = get(p+"post_attention_layernorm.weight", h); return },
			func() (e error) { L.q, e = lin(p+"self_attn.q_proj", h, cfg.Heads*d, qkvBias); return },
			func() (e error) { L.k, e = lin(p+"self_attn.k_proj", h, cfg.KVHeads*d, qkvBias); return },
			func() (e error) { L.v, e = lin(p+"self_attn.v_proj", h, cfg.KVHeads*d, qkvBias); return },
			func() (e error) { L.o, e = lin(p+"self_attn.o_proj", cfg.Heads*d, h, cfg.AttentionBias); return },
			func() (e error) { L.gate, e = lin(p+"mlp.gate_proj", h, cfg.Intermediate, cfg.MLPBias); return },
			func() (e error) { L.up, e = lin(p+"mlp.up_proj", h, cfg.Intermediate, cfg.MLPBias); return },
			func() (e error) { L.down, e = lin(p+"mlp.down_proj", cfg.Intermediate, h, cfg.MLPBias); return },
		}
		if cfg.QKNorm {
			steps = append(steps,
				func() (e error) { L.qNorm, e = get(p+"self_attn.q_norm.weight", d); return },
				func() (e error) { L.kNorm, e = get(p+"self_attn.k_norm.weight", d); return },
			)
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return nil, err
			}
		}
		m.layers = append(m.layers, L)
	}
	return m, nil
}

func writeModel(dir string, cfg *config, ts []safetensors.Tensor, dtype string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cj, err := json.MarshalIndent(cfg.toHF(), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(cj, '\n'), 0o644); err != nil {
		return err
	}
	if cfg.Vocab == TinyVocab {
		tok := `{"added_tokens":[{"id":256,"content":"<bos>"},{"id":257,"content":"<eos>"},{"id":258,"content":"<pad>"},{"id":259,"content":"[DELETE]"}],"model":{"type":"bytes"}}` + "\n"
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tok), 0o644); err != nil {
			return err
		}
	}
	return safetensors.Write(filepath.Join(dir, "model.safetensors"), dtype, ts)
}
