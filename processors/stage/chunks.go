package stage

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
)

// reassembly is how a stage reads records too large for one Kafka message
// (written as chunks, producers.Split): put back together before the stage
// sees them, bounded by the stage's record size limit, with broken chunk
// sequences written to the dead-letter topic (docs/kafka.md).
func (c *Config) reassembly(stage string, prod *producers.Producer, log zerolog.Logger) *consumers.ReassemblyConfig {
	rc := &consumers.ReassemblyConfig{
		DeadLetter: func(ctx context.Context, rec consumers.Record, reason, detail string) error {
			msg, err := c.deadLetter(stage, rec, reason, detail)
			if err != nil {
				return err
			}
			log.Warn().Str("reason", reason).Str("detail", truncate(detail, 200)).Int64("offset", rec.Offset).Msg("dead letter")
			return produceRetry(ctx, prod, []producers.Message{msg}, log)
		},
	}
	if c.Limits.MaxRecordBytes > 0 {
		rc.MaxRecordBytes = c.Limits.MaxRecordBytes
	}
	return rc
}

// Defaults of the Kafka record settings (docs/kafka.md has the measurements
// behind them).
const (
	// DefaultCompression is lz4: on creditflow's records it encodes 3–5×
	// cheaper than zstd for batches about 25 % larger (docs/kafka.md,
	// "Compression"), and encoding is on the stages' critical path.
	DefaultCompression = "lz4"
	// DefaultMaxMessageBytes is Kafka's default message.max.bytes and
	// max.message.bytes: the topics need no broker change.
	DefaultMaxMessageBytes = 1048588
)

func (c *Config) checkKafkaSizes() error {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxMessageBytes < 64<<10 {
		return fmt.Errorf("max message bytes %d is too small: use at least 65536 (Kafka's default is %d)", c.MaxMessageBytes, DefaultMaxMessageBytes)
	}
	if c.Compression == "" {
		c.Compression = DefaultCompression
	}
	return producers.CheckCompression(c.Compression)
}

// batchBytes is the producer batch limit under MaxMessageBytes, with room
// for the batch framing (900,000 at Kafka's default, as before).
func (c *Config) batchBytes() int64 {
	m := c.MaxMessageBytes
	if m <= 0 {
		m = DefaultMaxMessageBytes
	}
	return int64(max(m-148_588, m/2))
}

// ProducerConfig is the producer configuration the stages write with:
// brokers, security, compression, and batches (and chunks) that fit the
// topics' max.message.bytes.
func (c *Config) ProducerConfig() producers.Config {
	return producers.Config{Brokers: c.Brokers, Security: c.Security, Compression: c.Compression, BatchBytes: c.batchBytes()}
}

// fetchBytes is the consumers' per-partition fetch size: at least one
// whole message.
func (c *Config) fetchBytes() int {
	return max(1<<20, c.MaxMessageBytes)
}
