// Package hfcheck holds the tests that check creditflow's two scorers (the
// Go CPU scorer of package scorer/cpumodel, behind creditflow score, attention and
// scorer, and the PyTorch pod of scorer/gpupod) against Hugging Face transformers,
// the library every user's checkpoint comes from.
//
// testdata/transformers_ref.py builds random-weight models with transformers
// from the published configs of the checkpoints users run
// (testdata/configs: Qwen2.5-0.5B-Instruct, Qwen2.5-7B-Instruct, Qwen3-0.6B,
// Qwen3-8B, Llama-3.2-1B, Llama-3.1-8B), every structural field as published
// and only the sizes cut for the CPU, saves them with save_pretrained, and
// computes transformers' own LAPO row statistics and AttnSR step graphs. The
// tests score the same rows (the score stage's real backward and forward
// row sets) and the same step graphs with both scorers and compare; they
// also check that configs neither scorer implements are refused at load
// with a message naming the field. docs/model.md ("Checked against
// transformers") states the tolerances and what was measured.
//
// The package has no code of its own.
package hfcheck
