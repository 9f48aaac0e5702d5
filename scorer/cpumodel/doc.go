// Package cpumodel is the CPU reference scorer's network: a decoder-only
// Llama-family transformer in pure Go that loads Hugging Face safetensors
// checkpoints (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) or builds
// a tiny deterministic model, scores LAPO rows with shared-prefix reuse and
// computes AttnSR step graphs blockwise.
//
// # Guarantees
//
//   - Numerics follow the Hugging Face modeling code in float32: RMSNorm
//     (x·rsqrt(mean(x²)+eps)·w, mean accumulated in float64), rotary
//     embeddings in the rotate_half convention with inverse frequencies
//     computed as Hugging Face does (default, linear and llama3 rope_scaling),
//     grouped-query attention with a float32 softmax (float64 normalizer),
//     SwiGLU MLP, final norm, tied or untied LM head, Qwen2 q/k/v biases,
//     Llama attention_bias and mlp_bias, Qwen3 per-head q/k RMSNorm.
//     Log-probabilities use a float64 log-sum-exp. The tests compare against
//     an independent float64 implementation, an independent PyTorch one
//     (testdata/llama_ref.py) and Hugging Face transformers itself on models
//     built from the published configs of Qwen2.5, Qwen3 and Llama 3
//     checkpoints (package scorer/hfcheck: S, entropy and KL within 2e-5, step
//     graphs within 1e-5 relative).
//   - config.json is read as transformers 4.x and 5 write it (rope_theta and
//     rope_scaling, or rope_parameters; layer_types). What the network does
//     not implement is refused naming the field: other architectures or
//     model_type, RoPE types other than default, linear and llama3, a
//     partial_rotary_factor, sliding-window attention on any layer, a
//     quantization_config. WithMaxContext caps the context below
//     max_position_embeddings.
//   - ScoreRows equals ScoreRowsNaive exactly (bit for bit): the work done for
//     one position depends only on its token, its position and the cached keys
//     and values, never on how sequences were split or shared.
//   - StepGraphs never holds an N×N matrix: queries are handled in blocks of
//     QueryBlock tokens with O(N) probabilities per worker; it equals
//     StepGraphsDense within 1e-5.
//   - A *Model is immutable and safe for concurrent use; each call allocates
//     its own key/value cache and uses up to GOMAXPROCS goroutines.
//   - Bad input (token ids outside the vocabulary, bad spans or step ranges,
//     unknown layers, malformed or truncated safetensors, unsupported config
//     fields) gives an error that names the row, step, file, tensor or field;
//     nothing panics on input.
//
// # Cost
//
// ScoreRows builds a prefix trie over every row's full sequence
// (context+target) and forwards each trie edge once on top of its parent's
// key/value cache (a depth-first walk that truncates one cache), so the T+1
// backward rows of a trajectory forward the shared prefix once
// (Usage.TokensForwarded versus Usage.TokensRowByRow). The last layer runs
// attention and MLP only at the positions whose next token is scored, and the
// LM head only there. StepGraphs runs the layers up to the deepest requested
// one and stops.
//
// # The built-in models
//
// Tiny() is a 3-layer Llama (hidden 64, 2 heads of head_dim 32, SwiGLU 192)
// over a byte-level vocabulary of 260 ids (bytes, TinyBOS, TinyEOS, TinyPad,
// TinyDelete = "[DELETE]"), trained on the synthetic worlds of
// harness/synth by harness/tinymodel/train.py; its Hugging Face folder
// scorer/cpumodel/tiny is embedded in the binary (docs/model.md). TinyRandom() is a
// 2-layer Llama over the same vocabulary with weights from a fixed-seed
// splitmix64 generator: identical on every machine. WriteTiny and
// WriteTinyRandom write them as Hugging Face folders that Load reads back to
// the same numbers, for other implementations (such as the GPU scorer) to
// test against.
//
// # Files
//
// config.go reads config.json; model.go loads a checkpoint folder and builds
// the network (its tensors read by the subpackage safetensors, which owns
// the file format and its validation); forward.go is the forward pass;
// score.go the LAPO rows with prefix sharing; statistic.go the entropy and
// kl statistics; attention.go the step graphs; jsonl.go the JSON-lines
// commands (creditflow score, creditflow attention); tiny.go and
// tinyrandom.go the built-in models. Rows, steps, step graphs, usage and the
// statistics' names are the scorer vocabulary's (package scorer): this
// package implements it and imports it, never the reverse.
package cpumodel
