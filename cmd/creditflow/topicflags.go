package main

import (
	"github.com/creditflow/creditflow/processors/stage"
)

// topicRetentionFlags are the retention settings of the topics a command
// creates (run --create-topics, replay's outputs), the chart's KafkaTopic
// defaults (docs/kafka.md).
func topicRetentionFlags(fs *flagSet, cfg *stage.Config) {
	fs.inGroup(groupKafka, func() {
		fs.DurationVar(&cfg.Retention, "retention", cfg.Retention,
			"retention.ms of the trajectories, scored and samples topics created (0: the brokers' default; negative: keep for ever)")
		fs.DurationVar(&cfg.DeadLetterRetention, "dead-letter-retention", cfg.DeadLetterRetention,
			"retention.ms of the dead-letter topic created (0: the brokers' default; negative: keep for ever)")
	})
}
