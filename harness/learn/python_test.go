package learn

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartCheckpointPerWorld: the written package holds each world's own
// starting checkpoint where it has one (widesearch, rumour) and the shared one
// otherwise (docs/learn.md, "The starting policy" and "The rumour world").
func TestStartCheckpointPerWorld(t *testing.T) {
	pkg, err := writePackage(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for world, want := range map[string]string{"searchqa": "start", "household": "start", "widesearch": "start-widesearch", "rumour": "start-rumour"} {
		dir := startCheckpoint(pkg, world)
		if got := filepath.Base(dir); got != want {
			t.Errorf("%s: start checkpoint %s, want %s", world, got, want)
		}
		for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
			if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
				t.Errorf("%s: %s missing or empty (%v)", world, f, err)
			}
		}
	}
}
