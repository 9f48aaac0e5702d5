package stage

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/policy"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/state"
	"github.com/creditflow/creditflow/vocab"
)

// Topics names the topics of the pipeline.
type Topics struct {
	Trajectories string // input of the score stage (key prompt_id)
	Scored       string // score stage → advantage stage (key prompt_id)
	Samples      string // output (key prompt_id)
	DeadLetters  string // bad input with reason and original bytes
	State        string // compacted changelog of the advantage stage's partition snapshots
	Policy       string // compacted policy announcements (followed, never written by the stages); "" to not follow
	SamplesStale string // samples more than MaxPolicyLag versions behind (key prompt_id)
}

// DefaultTopics are the topic names used when none are configured.
func DefaultTopics() Topics {
	return Topics{
		Trajectories: "creditflow.trajectories",
		Scored:       "creditflow.scored",
		Samples:      "creditflow.samples",
		DeadLetters:  "creditflow.dead-letters",
		State:        "creditflow.advantage-state",
		Policy:       policy.DefaultTopic,
		SamplesStale: "creditflow.samples.stale",
	}
}

// Config configures both stages.
type Config struct {
	Brokers  []string
	Security kafkasec.Config
	GroupID  string // consumer group prefix: "<GroupID>.score" and "<GroupID>.advantage"
	Topics   Topics

	Direction vocab.Direction // LAPO: backward (default) | forward
	// LAPOStatistic is what LAPO rows are scored with (docs/method.md §2.4):
	// logprob (the default; "" too), entropy or kl. The last two need a
	// scorer that advertises scorer.FeatureStatistics.
	LAPOStatistic vocab.Statistic
	Credit        credit.Config // method and every default of docs/method.md
	Layers        []int         // AttnSR layers to capture; empty: docs/method.md §3.1 mapping for the scorer's depth
	Window        state.WindowConfig
	Limits        schemas.Limits

	// MaxPolicyLag routes samples whose policy_version is more than this
	// many versions behind the newest announced version to
	// Topics.SamplesStale (PolicyLagOff, the default: never).
	MaxPolicyLag int64
	// SuccessThreshold: a sample with reward >= it counts as a success in
	// the metrics (default 1.0).
	SuccessThreshold float64
	// Policy is a follower of Topics.Policy the caller runs; nil: the
	// advantage stage follows the topic itself.
	Policy *policy.Follower

	MaxInFlight      int           // score stage: trajectories being scored per partition (default 256)
	MaxInFlightBytes int           // score stage: their record bytes per partition (default 32 MiB; at least one record)
	MaxUnackedBytes  int           // advantage stage: encoded samples written and not yet acknowledged, per partition (default 4 MiB; at least 4 groups)
	CommitInterval   time.Duration // how often offsets (and snapshots) are committed (default 500ms)
	SessionTimeout   time.Duration // consumer group session: how soon a dead member's partitions move (default 10s)
	IdleAfter        time.Duration // advantage stage: a partition idle this long advances its event time by processing time (default: the window timeout; 0 keeps it)

	// Kafka record sizes and compression (docs/kafka.md).
	Compression     string // producer compression: lz4 (default), zstd, snappy, gzip or none
	MaxMessageBytes int    // the topics' max.message.bytes (default 1048588, Kafka's); larger records are written as chunks
	// ReplicationFactor of the topics TopicSpecs describes (0: the
	// brokers' default, default.replication.factor). Above 1 the topics
	// also get min.insync.replicas min(2, ReplicationFactor).
	ReplicationFactor int
	// Retention is the retention.ms of the trajectories, scored, samples
	// and stale samples topics TopicSpecs describes, DeadLetterRetention
	// the dead-letter topic's (DefaultConfig: 7 and 30 days, the chart's;
	// 0: the brokers' default, log.retention.*; negative: kept for ever).
	// The state and policy topics are compacted instead.
	Retention           time.Duration
	DeadLetterRetention time.Duration

	Logger  zerolog.Logger
	Metrics *Metrics
}

// The score stage's window per partition: trajectories read and not yet
// written, by count and by record bytes. A deep window keeps the scorers
// busy (every trajectory waits for its scorer call; 64 held the instant
// scorer of the bench to 0.4 of a passthrough's rate, 256 to 0.55); the
// bytes bound keeps long trajectories' windows to a few tens of MiB
// (about 60 trajectories of 128k tokens).
const (
	DefaultMaxInFlight      = 256
	DefaultMaxInFlightBytes = 32 << 20
)

// DefaultMaxUnackedBytes is the advantage stage's bound per partition on
// the encoded samples it has handed to the producer and the broker has not
// acknowledged yet: 4 MiB, about 40 search-QA groups. Working through a
// backlog (a restart, a replay, the bench) the stage builds samples faster
// than a producer writes them, so the bound is then full; a
// sample's buffer is reused once acknowledged, and a bound by bytes keeps a
// partition encoding into buffers it already has rather than new memory
// (docs/performance-passes.md measures the difference). At 50 ms per
// acknowledgement it still lets a partition write 80 MB/s. Whatever their
// size, minUnackedGroups groups may be in flight: one 128k-token group's
// samples take about 8.5 MB, and one at a time starved the producer.
const (
	DefaultMaxUnackedBytes = 4 << 20
	minUnackedGroups       = 4
)

// scoreReadBuffer is the score stage consumer's buffer per partition (each
// of its read channels): up to 64 records, fewer with a smaller window.
func (c *Config) scoreReadBuffer() int { return min(c.MaxInFlight, 64) }

// ScoreReadBuffer is scoreReadBuffer for a configuration with defaults
// applied, for a comparison that reads alike (the bench's passthrough).
func (c Config) ScoreReadBuffer() int {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c.scoreReadBuffer()
}

// DefaultConfig is a complete configuration for the embedded default.
func DefaultConfig() Config {
	return Config{
		GroupID:             "creditflow",
		Topics:              DefaultTopics(),
		Direction:           Backward,
		LAPOStatistic:       credit.StatLogProb,
		Credit:              credit.DefaultConfig(),
		Window:              state.DefaultWindow(),
		Limits:              schemas.DefaultLimits(),
		MaxPolicyLag:        PolicyLagOff,
		SuccessThreshold:    1.0,
		MaxInFlight:         DefaultMaxInFlight,
		MaxInFlightBytes:    DefaultMaxInFlightBytes,
		MaxUnackedBytes:     DefaultMaxUnackedBytes,
		Compression:         DefaultCompression,
		MaxMessageBytes:     DefaultMaxMessageBytes,
		Retention:           DefaultRetention,
		DeadLetterRetention: DefaultDeadLetterRetention,
		CommitInterval:      500 * time.Millisecond,
		IdleAfter:           120 * time.Second,
		Logger:              zerolog.Nop(),
	}
}

// Check reports a configuration that cannot work, saying what to change.
func (c *Config) Check() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("no brokers: set --brokers (or CREDITFLOW_BROKERS) to host:port,...")
	}
	if c.GroupID == "" {
		return fmt.Errorf("empty consumer group id: set --group")
	}
	t := c.Topics
	for name, v := range map[string]string{"trajectories": t.Trajectories, "scored": t.Scored, "samples": t.Samples, "dead-letters": t.DeadLetters, "state": t.State, "samples-stale": t.SamplesStale} {
		if v == "" {
			return fmt.Errorf("topic %s has no name", name)
		}
	}
	if c.ReplicationFactor < 0 {
		return fmt.Errorf("--replication-factor %d: use a positive factor, or 0 for the brokers' default", c.ReplicationFactor)
	}
	if err := c.checkRetention(); err != nil {
		return err
	}
	if c.MaxPolicyLag < PolicyLagOff {
		return fmt.Errorf("--max-policy-lag %d: want a number of versions >= 0, or %d for off", c.MaxPolicyLag, PolicyLagOff)
	}
	if c.MaxPolicyLag >= 0 && c.Topics.Policy == "" {
		return fmt.Errorf("--max-policy-lag needs the policy topic to follow: set --topic-policy")
	}
	if c.Direction != Backward && c.Direction != Forward {
		return fmt.Errorf("direction %q: want backward or forward", c.Direction)
	}
	if c.LAPOStatistic != "" {
		if err := credit.CheckStatistic(c.LAPOStatistic); err != nil {
			return fmt.Errorf("--lapo-statistic: %w", err)
		}
	}
	if err := c.Credit.Validate(); err != nil {
		return err
	}
	seen := make(map[int]bool, len(c.Layers))
	for _, l := range c.Layers {
		if l < 0 {
			return fmt.Errorf("--layers: layer %d is negative; layers are zero-based decoder-layer indices", l)
		}
		if seen[l] {
			return fmt.Errorf("--layers: layer %d is listed twice; list each layer once (a step graph per layer, each counted once in the mean)", l)
		}
		seen[l] = true
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if c.MaxUnackedBytes <= 0 {
		c.MaxUnackedBytes = DefaultMaxUnackedBytes
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = 500 * time.Millisecond
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	return c.checkKafkaSizes()
}
