package cpumodel

// Row is one LAPO scoring row (docs/method.md §2.1): the mean natural-log probability of
// Target[Span[0]:Span[1]] given Context followed by Target[:k], with the
// logits divided by Temperature before the softmax.
type Row struct {
	Context []int32
	Target  []int32
	Span    [2]int // half-open [a, b) into Target
	// Temperature is the rollout's sampling temperature, > 0; 0 means 1.
	// The LAPO reference scores the gold answer under the sampling
	// distribution, log softmax(logits / Temperature).
	Temperature float64
	// ReferenceContext is the second context of the kl statistic
	// (ScoreRowsStatistic); other statistics ignore it.
	ReferenceContext []int32
}

// Step is one AttnSR step (docs/method.md §3.1): half-open token ranges into the
// trajectory's token array. An empty Observation range (start == end) means
// the step has no environment segment.
type Step struct {
	Action      [2]int
	Observation [2]int
}

// StepGraph holds G_AA and G_AO of one layer (docs/method.md §3.1), K×K, row j = querying
// step, column k; entries with k >= j are zero.
type StepGraph struct {
	Layer int
	AA    [][]float64
	AO    [][]float64
}

// Usage counts tokens: what was actually forwarded through the network, and
// what a row-by-row computation (each row alone, no prefix sharing) would forward.
type Usage struct {
	TokensForwarded int64
	TokensRowByRow  int64
	Truncations     int64 // rows whose context was cut from the left to fit MaxContext
}

// Info describes a loaded model.
type Info struct {
	Name           string // e.g. "creditflow-tiny" or the checkpoint folder's base name
	Architecture   string // LlamaForCausalLM | Qwen2ForCausalLM | Qwen3ForCausalLM
	Layers         int
	VocabSize      int
	MaxContext     int
	PlaceholderIDs []int32 // tokenization of "[DELETE]" for this tokenizer (docs/method.md §2.1)
}
