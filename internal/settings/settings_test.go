package settings

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Settings come from the config file, then the environment, then flags, each
// overriding the one before.
func TestLoadSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	if err := os.WriteFile(file, []byte(`{"brokers": ["a:1", "b:2"], "lambda": 0.25, "group": "from-file", "stage": "score"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.String("config", "", "")
	brokers := fs.String("brokers", "x:9", "")
	lambda := fs.Float64("lambda", 0.5, "")
	group := fs.String("group", "default", "")
	stage := fs.String("stage", "both", "")
	t.Setenv("CREDITFLOW_GROUP", "from-env")
	t.Setenv("CREDITFLOW_STAGE", "advantage")
	if err := Load(fs, []string{"--config", file, "--stage", "both"}); err != nil {
		t.Fatal(err)
	}
	if *brokers != "a:1,b:2" || *lambda != 0.25 || *group != "from-env" || *stage != "both" {
		t.Fatalf("brokers %q lambda %v group %q stage %q", *brokers, *lambda, *group, *stage)
	}
}

func TestLoadSettingsRejectsUnknownKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(`{"lamda": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Float64("lambda", 0.5, "")
	err := Load(fs, []string{"--config=" + file})
	if err == nil || !strings.Contains(err.Error(), `"lamda"`) {
		t.Fatalf("unknown key: %v", err)
	}
}
