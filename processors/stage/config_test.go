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

// TestTopicSpecsReplicationFactor: the topics --create-topics makes take
// the brokers' default replication factor unless one is configured.
func TestTopicSpecsReplicationFactor(t *testing.T) {
	for _, rf := range []int{0, 3} {
		cfg := DefaultConfig()
		cfg.ReplicationFactor = rf
		specs := cfg.TopicSpecs(4)
		if len(specs) < 7 {
			t.Fatalf("%d topic specs, want the 7 topics of the pipeline", len(specs))
		}
		for _, s := range specs {
			if s.ReplicationFactor != rf {
				t.Errorf("replication factor %d: topic %s gets %d", rf, s.Name, s.ReplicationFactor)
			}
		}
	}
}
