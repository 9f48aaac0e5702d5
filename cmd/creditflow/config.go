package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/rs/zerolog"
)

// loadSettings applies, in increasing precedence, a JSON config file (an
// object whose keys are flag names), CREDITFLOW_<FLAG> environment variables
// (dashes as underscores) and the command line. It parses args itself.
// The config file is named by --config or CREDITFLOW_CONFIG.
func loadSettings(fs *flag.FlagSet, args []string) error {
	path := os.Getenv("CREDITFLOW_CONFIG")
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				path = args[i+1]
			}
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			path = a[strings.Index(a, "=")+1:]
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		var kv map[string]any
		if err := json.Unmarshal(b, &kv); err != nil {
			return fmt.Errorf("config file %s: %w (want a JSON object of flag names to values)", path, err)
		}
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "config" {
				continue
			}
			if fs.Lookup(k) == nil {
				return fmt.Errorf("config file %s: unknown setting %q (settings are the flag names of 'creditflow %s -h')", path, k, fs.Name())
			}
			v := kv[k]
			var s string
			switch x := v.(type) {
			case string:
				s = x
			case []any:
				parts := make([]string, len(x))
				for i, p := range x {
					parts[i] = fmt.Sprint(p)
				}
				s = strings.Join(parts, ",")
			default:
				s = fmt.Sprint(x)
			}
			if err := fs.Set(k, s); err != nil {
				return fmt.Errorf("config file %s: %s: %w", path, k, err)
			}
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "CREDITFLOW_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	return fs.Parse(args)
}

// newLogger is the JSON logger on stderr that every command uses.
func newLogger(level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-level %q: %w (use debug, info, warn or error)", level, err)
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
