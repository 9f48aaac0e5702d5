// Package pod holds the GPU scorer pod: a Python (PyTorch) server in
// scorer/gpupod/cfpod that speaks the creditflow.scorer/v1 protocol
// (docs/scorer-protocol.md) on accelerator machines. See scorer/gpupod/README.md.
//
// The Go package itself has no code; its tests run the pod's Python tests,
// install it with pip into fresh virtual environments, start it on 127.0.0.1
// with the project's Python environment (internal/pyenv) and check through client.Client that its LAPO
// scores and AttnSR step graphs match the Go reference scorer
// (local.New) on Llama, Qwen2 and Qwen3 checkpoints, and that hot loading
// a new policy version works.
package pod
