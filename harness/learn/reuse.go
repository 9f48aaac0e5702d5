package learn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Earlier runs can join a comparison instead of being run again: a
// comparison's .json, or what `creditflow learn --json` printed (its last
// line is one summary). A run is only taken for the method, seed and
// settings it was made with.

// LoadRuns reads the summaries in path: a comparison ({"runs": [...]}) or
// the output of one `learn --json` run (the summary on its last non-empty
// line).
func LoadRuns(path string) ([]Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Comparison
	if err := json.Unmarshal(b, &c); err == nil && len(c.Runs) > 0 {
		return c.Runs, nil
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	var s Summary
	if err := json.Unmarshal(lines[len(lines)-1], &s); err != nil || s.Method == "" || len(s.Eval) == 0 {
		return nil, fmt.Errorf("%s holds neither a comparison's runs nor a `creditflow learn --json` summary on its last line", path)
	}
	return []Summary{s}, nil
}

// Matches says whether s is the run that o would make: the same method,
// seed and world, and the same settings (every field of Settings: the
// trainer's epochs, clip and importance cap, LAPO's λ and direction,
// AttnSR's output, the judge's noise, …). A summary that records no
// settings, written before runs recorded them, never matches: what its
// trainer did cannot be checked. The reason is returned when it does not
// match.
func (s Summary) Matches(o Options) (bool, string) {
	o = o.resolved()
	switch {
	case s.Method != o.Method || s.Seed != o.Seed:
		return false, fmt.Sprintf("a run of %s seed %d", s.Method, s.Seed)
	case s.World != o.World:
		return false, fmt.Sprintf("world %s, not %s", s.World, o.World)
	case s.Settings == nil:
		return false, "it records no settings (made before runs recorded them)"
	}
	if d := s.Settings.diff(*settingsOf(o)); d != "" {
		return false, "settings differ: " + d
	}
	return true, ""
}
