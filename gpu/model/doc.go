// Package model is the CPU reference scorer's network: a decoder-only
// Llama-family transformer in pure Go that loads Hugging Face safetensors
// checkpoints (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) or builds
// a tiny deterministic model, scores LAPO rows with shared-prefix reuse and
// computes AttnSR step graphs blockwise.
package model
