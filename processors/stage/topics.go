package stage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/creditflow/creditflow/producers"
)

// UsedTopics are the topics the given stages read or write: the score stage
// reads Trajectories and writes Scored and DeadLetters; the advantage stage
// reads Scored (and Policy, when followed) and writes Samples, DeadLetters,
// State (and SamplesStale, when MaxPolicyLag routes samples there).
func (c *Config) UsedTopics(score, advantage bool) []string {
	var out []string
	add := func(names ...string) {
		for _, n := range names {
			if n == "" {
				continue
			}
			dup := false
			for _, o := range out {
				dup = dup || o == n
			}
			if !dup {
				out = append(out, n)
			}
		}
	}
	if score {
		add(c.Topics.Trajectories, c.Topics.Scored, c.Topics.DeadLetters)
	}
	if advantage {
		add(c.Topics.Scored, c.Topics.Samples, c.Topics.DeadLetters, c.Topics.State)
		if c.Policy == nil {
			add(c.Topics.Policy)
		}
		if c.MaxPolicyLag != PolicyLagOff {
			add(c.Topics.SamplesStale)
		}
	}
	return out
}

// WaitTopics waits until every topic the given stages use exists, at most
// timeout (topics can be in creation when the processor starts), and
// otherwise returns an error naming the missing ones. It never creates a
// topic.
func (c *Config) WaitTopics(ctx context.Context, score, advantage bool, timeout time.Duration) error {
	topics := c.UsedTopics(score, advantage)
	deadline := time.Now().Add(timeout)
	backoff := 200 * time.Millisecond
	logged := false
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		missing, err := producers.MissingTopics(qctx, c.Brokers, c.Security, topics...)
		cancel()
		if err == nil && len(missing) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(backoff).After(deadline) {
			if err != nil {
				return fmt.Errorf("checking the topics at %s: %w", strings.Join(c.Brokers, ","), err)
			}
			return fmt.Errorf("missing topics at %s: %s; create them (docs/kafka.md lists each topic's partitions and settings) or run with --create-topics N",
				strings.Join(c.Brokers, ","), strings.Join(missing, ", "))
		}
		if !logged && err == nil {
			c.Logger.Warn().Strs("missing", missing).Dur("timeout_ms", timeout).Msg("waiting for topics to exist")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
