package main

import (
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// newLogger is the JSON logger on stderr that every command uses.
func newLogger(level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), usagef("--log-level %q: %w (use debug, info, warn or error)", level, err)
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger(), nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
