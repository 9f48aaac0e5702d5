package main

import (
	"github.com/creditflow/creditflow/processors/stage"
)

// kafkaSizeFlags are the record-size and compression settings of the
// stages' Kafka clients (docs/kafka.md).
func kafkaSizeFlags(fs *flagSet, cfg *stage.Config) {
	fs.inGroup(groupKafka, func() { kafkaSizeFlagDefs(fs, cfg) })
}

func kafkaSizeFlagDefs(fs *flagSet, cfg *stage.Config) {
	fs.StringVar(&cfg.Compression, "compression", cfg.Compression, "producer compression: lz4, zstd, snappy, gzip or none (docs/kafka.md has measurements)")
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", cfg.MaxMessageBytes,
		"the topics' max.message.bytes (set by --create-topics; keep the brokers' message.max.bytes and replica.fetch.max.bytes at least this); records larger than one message are written as chunks")
}
