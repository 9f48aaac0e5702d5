// Package settings reads a command's settings from, in increasing
// precedence, a JSON config file, CREDITFLOW_<FLAG> environment variables
// and the command line, all onto one flag.FlagSet (README, "Running against a real cluster").
package settings

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Load applies, in increasing precedence, a JSON config file (an
// object whose keys are flag names), CREDITFLOW_<FLAG> environment variables
// (dashes as underscores) and the command line. It parses args itself.
// The config file is named by --config or CREDITFLOW_CONFIG.
func Load(fs *flag.FlagSet, args []string) error {
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
				return fmt.Errorf("config file %s: %s", path, badValue(fs.Lookup(k), k, s, err))
			}
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "CREDITFLOW_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("environment variable %s", badValue(f, name, v, err))
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	return fs.Parse(args)
}

// badValue says which setting got which value, what was wanted, and why
// it was refused: `lambda: read "lots", want a number (invalid syntax)`.
func badValue(f *flag.Flag, name, value string, err error) string {
	want := "a valid value"
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case float64:
			want = "a number"
		case int, int64, uint, uint64:
			want = "an integer"
		case bool:
			want = "true or false"
		case time.Duration:
			want = "a duration such as 500ms, 30s or 2m"
		}
	}
	cause := err.Error()
	if errors.Is(err, strconv.ErrSyntax) {
		cause = "invalid syntax"
	} else if errors.Is(err, strconv.ErrRange) {
		cause = "out of range"
	}
	return fmt.Sprintf("%s: read %q, want %s (%s); see --%s in -h", name, value, want, cause, f.Name)
}
