package stage

import (
	"context"

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
