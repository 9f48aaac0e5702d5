package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/creditflow/creditflow/gpu/model"
)

func init() {
	register("attention", "AttnSR step graphs on a model: JSON Lines in, {\"layers\":[…]} out (SPEC §5.3)", runAttention)
}

func runAttention(args []string) error {
	fs := flag.NewFlagSet("attention", flag.ContinueOnError)
	dir := fs.String("model", "tiny", modelFlagHelp)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: creditflow attention [--model DIR]

Reads JSON Lines on stdin, one trajectory per line:
  {"tokens":[ids], "steps":[{"action":[s,e], "observation":[s,e] or null}], "layers":[l...]}
(half-open ranges into tokens; zero-based decoder layers; without "layers" the
SPEC §3.1 default layers of the model, each once) and writes one line each:
  {"layers":[{"layer":l, "aa":KxK, "ao":KxK}]}
row j = querying step, column k; zeros where k >= j. The first malformed line
stops the command with an error naming the line number (exit status 1); all
lines before it have been answered.

Flags:`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := loadModelFlag(*dir)
	if err != nil {
		return err
	}
	return model.RunAttentionJSONL(m, os.Stdin, os.Stdout)
}
