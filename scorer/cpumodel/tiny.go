package cpumodel

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// The trained built-in model: scorer/cpumodel/tiny, made by harness/tinymodel/train.py
// (docs/model.md).
//
//go:embed tiny/config.json tiny/model.safetensors tiny/tokenizer.json
var tinyFS embed.FS

// Names of the built-in models (the --model flags accept them).
const (
	TinyName       = "creditflow-tiny"        // trained on the synthetic worlds; the default
	TinyRandomName = "creditflow-tiny-random" // random weights from a fixed seed
)

// Tiny returns the built-in model: a 3-layer Llama (hidden 64, 2 heads of
// head_dim 32, SwiGLU 192, untied head; tiny/config.json) over a byte-level vocabulary (ids 0..255 are
// bytes, then TinyBOS, TinyEOS, TinyPad and TinyDelete, the "[DELETE]"
// placeholder), trained on the synthetic search-QA and ALFWorld worlds
// (harness/synth) to answer from the evidence in its context. Its weights
// are embedded in the binary: the same numbers on every machine. Use
// TinyTokens to turn text into its ids; TinyRandom is the untrained
// counterpart.
func Tiny() *Model {
	m, err := loadTiny()
	if err != nil {
		panic("model: built-in tiny model is invalid: " + err.Error()) // a programming error, covered by tests
	}
	return m
}

func loadTiny() (*Model, error) {
	cj, err := tinyFS.ReadFile("tiny/config.json")
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig("tiny/config.json", cj)
	if err != nil {
		return nil, err
	}
	if cfg.Vocab != TinyVocab {
		return nil, fmt.Errorf("tiny/config.json: vocab_size %d, want %d", cfg.Vocab, TinyVocab)
	}
	st, err := tinyFS.ReadFile("tiny/model.safetensors")
	if err != nil {
		return nil, err
	}
	ts, err := safetensors.FromBytes("tiny/model.safetensors", st)
	if err != nil {
		return nil, err
	}
	m, err := build(cfg, ts.Load, ts.Has)
	if err != nil {
		return nil, err
	}
	m.name = TinyName
	m.placeholder = []int32{TinyDelete}
	return m, nil
}

// Builtin returns the built-in model called name: "tiny" (or "") is Tiny,
// "tiny-random" TinyRandom; ok is false for any other name.
func Builtin(name string) (m *Model, ok bool) {
	switch name {
	case "", "tiny", TinyName:
		return Tiny(), true
	case "tiny-random", TinyRandomName:
		return TinyRandom(), true
	}
	return nil, false
}

// WriteTiny writes the built-in model to dir as a Hugging Face folder
// (config.json, model.safetensors, tokenizer.json naming the placeholder), so
// Load(dir) gives exactly the numbers of Tiny().
func WriteTiny(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		b, err := tinyFS.ReadFile("tiny/" + f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
