package replay

import (
	"context"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/processors/stage"
)

// TestCheckOutputsRefusesLiveAndSharedTopics: a replay's outputs are
// refused when one is a live topic or the scored topic it reads, or when
// two outputs share a topic (found before a broker is asked anything).
func TestCheckOutputsRefusesLiveAndSharedTopics(t *testing.T) {
	live := stage.DefaultTopics()
	replayCfg := func() stage.Config {
		cfg := stage.DefaultConfig()
		cfg.Topics.Samples, cfg.Topics.State, cfg.Topics.DeadLetters = "r.samples", "r.state", "r.dead-letters"
		return cfg
	}
	for _, c := range []struct {
		name      string
		edit      func(*stage.Config)
		rescoreTo string
		want      string
	}{
		{"live samples", func(c *stage.Config) { c.Topics.Samples = live.Samples }, "", "--topic-samples " + live.Samples + " is the live samples topic"},
		{"live state", func(c *stage.Config) { c.Topics.State = live.State }, "", "is the live state topic"},
		{"the topic it reads", func(c *stage.Config) { c.Topics.Scored = "mine.scored"; c.Topics.DeadLetters = "mine.scored" }, "", "the scored topic this replay reads"},
		{"shared", func(c *stage.Config) { c.Topics.State = "r.samples" }, "", "--topic-samples and --topic-state both name r.samples"},
		{"re-scored into samples", nil, "r.samples", "both name r.samples"},
	} {
		cfg := replayCfg()
		if c.edit != nil {
			c.edit(&cfg)
		}
		err := CheckOutputs(context.Background(), cfg, c.rescoreTo, true)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if err := CheckOutputs(context.Background(), replayCfg(), "r.samples.scored", true); err != nil {
		t.Errorf("distinct new outputs refused: %v", err)
	}
}

// TestOutputTopics: the replay creates its samples (and re-scored, and
// stale) topics and its state topic with the scored topic's partitions,
// the state topic compacted, the others with retention.
func TestOutputTopics(t *testing.T) {
	cfg := stage.DefaultConfig()
	cfg.Topics.Samples, cfg.Topics.State, cfg.Topics.DeadLetters, cfg.Topics.SamplesStale = "r", "r.state", "r.dl", "r.stale"
	cfg.MaxPolicyLag = 2
	specs := OutputTopics(cfg, 3, "r.scored")
	got := map[string]int{}
	for _, s := range specs {
		got[s.Name] = s.Partitions
		if s.Compact != (s.Name == "r.state") {
			t.Errorf("%s: compact %v", s.Name, s.Compact)
		}
		if _, ok := s.Configs["retention.ms"]; ok == s.Compact {
			t.Errorf("%s: configs %v, want retention.ms on the topics that are not compacted", s.Name, s.Configs)
		}
	}
	want := map[string]int{"r": 3, "r.dl": 1, "r.state": 3, "r.stale": 3, "r.scored": 3}
	if len(got) != len(want) {
		t.Fatalf("topics %v, want %v", got, want)
	}
	for n, p := range want {
		if got[n] != p {
			t.Errorf("%s: %d partitions, want %d", n, got[n], p)
		}
	}
}
