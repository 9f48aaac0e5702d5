package cpumodel

// Info describes a loaded model.
type Info struct {
	Name           string // e.g. "creditflow-tiny" or the checkpoint folder's base name
	Architecture   string // LlamaForCausalLM | Qwen2ForCausalLM | Qwen3ForCausalLM
	Layers         int
	VocabSize      int
	MaxContext     int
	PlaceholderIDs []int32 // tokenization of "[DELETE]" for this tokenizer (docs/method.md §2.1)
}
