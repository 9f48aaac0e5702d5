package learn

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteReportsFromJSON: --report writes the table and the picture of
// a comparison again from its .json alone, and refuses a file without runs.
func TestWriteReportsFromJSON(t *testing.T) {
	dir := t.TempDir()
	c := Comparison{Runs: []Summary{run3(MethodLAPO, 1, 0.4, 0.6, 0.9), run3("grpo", 1, 0.4, 0.5, 0.6)}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "cmp.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if err := WriteReports([]string{f}, &stderr); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "cmp.md"))
	if err != nil || string(md) != c.Markdown() {
		t.Fatalf("cmp.md: %v, differs from the comparison's table", err)
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "cmp.svg")); err != nil || string(svg) != c.SVG(c.Title()) {
		t.Fatalf("cmp.svg: %v, differs from the comparison's picture", err)
	}
	if !strings.Contains(stderr.String(), "wrote "+filepath.Join(dir, "cmp")+".md") {
		t.Errorf("stderr %q does not say what was written", stderr.String())
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"runs": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteReports([]string{empty}, &stderr); err == nil || !strings.Contains(err.Error(), "holds no comparison's runs") {
		t.Fatalf("a comparison without runs: %v", err)
	}
}

// TestSummaryText: the summary prints versions in numeric order and the
// clip hits summed over the steps.
func TestSummaryText(t *testing.T) {
	s := run3(MethodLAPO, 2, 0.25, 0.5)
	s.SamplesByPolicyVersion = map[string]int{"10": 3, "2": 5, "0": 1}
	s.Steps = []TrainerStep{{GradClipHits: 2}, {GradClipHits: 3, Loss: 0.5}}
	var b bytes.Buffer
	s.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		"method            lapo on searchqa, seed 2\n",
		"held-out success  0.250 → 0.500",
		"by version        v0 0.25  v1 0.50\n",
		"(5 clip hits in 2 steps)",
		"samples by policy_version         v0:1 v2:5 v10:3\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
