package stage

import (
	"strings"
	"testing"
)

// A layer listed twice would make every AttnSR scored record invalid (a
// layer may appear once per record), so the configuration check refuses it.
func TestCheckRejectsRepeatedLayers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.Credit.Method = "attnsr"
	cfg.Layers = []int{1, 0, 1}
	err := cfg.Check()
	if err == nil || !strings.Contains(err.Error(), "layer 1") || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("Check() = %v, want an error naming layer 1 listed twice", err)
	}
	cfg.Layers = []int{1, 0}
	if err := cfg.Check(); err != nil {
		t.Fatalf("distinct layers: Check() = %v", err)
	}
	cfg.Layers = []int{-1}
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "-1") {
		t.Fatalf("negative layer: Check() = %v, want an error", err)
	}
}
