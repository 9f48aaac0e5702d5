package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/creditflow/creditflow/internal/pyenv"
)

func init() {
	register("pyenv", "build (once) or find the project's pinned Python environment; prints its interpreter", runPyenv)
}

func runPyenv(args []string) error {
	fs := newFlagSet("pyenv", `usage: creditflow pyenv [--check]

Builds the project's Python environment from python/requirements.lock (PyTorch 2, transformers,
safetensors, tokenizers, numpy, confluent-kafka, fastavro, avro, pytest; from the Python package index,
a few minutes and about 6 GB the first time) unless it is already built, and prints its
interpreter. The environment lives under $CREDITFLOW_VENV, else ~/.cache/creditflow/venv-<hash of
the lock>; the tests, the scorer pod's tests and creditflow learn use it.`)
	var check *bool
	fs.inGroup(groupGeneral, func() {
		check = fs.Bool("check", false, "only report whether it is built (exit 1 if not); build nothing")
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if *check {
		py, err := pyenv.Python()
		if err != nil {
			return err
		}
		fmt.Println(py)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	py, err := pyenv.Ensure(ctx, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Println(py)
	return nil
}
