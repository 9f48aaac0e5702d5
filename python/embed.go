// Package python holds creditflow's Python package (python/creditflow) so that Go
// commands can hand it to the processes they start: `creditflow learn` writes it into
// its run folder and starts the rollout workers and the trainer from it with the system
// Python. The files are the package itself, byte for byte; nothing here is Go logic.
package python

import "embed"

// Package is the creditflow Python package: creditflow/*.py, the source of its compiled
// decoder (creditflow/_cdecode.c, built on first use), its schemas, the
// training loop (creditflow/learn) and the loop's starting checkpoints
// (creditflow/learn/start, and start-<world> for the worlds that have their own).
//
//go:embed creditflow/*.py creditflow/*.c creditflow/schemas creditflow/learn/*.py creditflow/learn/start creditflow/learn/start-widesearch creditflow/learn/start-household-long creditflow/learn/start-rumour
var Package embed.FS

// Lock is the pinned list of the project's Python environment (requirements.lock):
// internal/pyenv builds the environment from it and names it by its hash.
//
//go:embed requirements.lock
var Lock []byte
