// Package bench is the loadtest bench command (go run ./loadtest bench):
// what the stages themselves cost, measured against a Kafka passthrough of
// the same records on the same broker, per trajectory size; the latency the
// advantage stage adds; the bytes held per open group member; optionally how
// throughput scales with replicas and what a Python trainer reads
// (docs/performance.md).
//
// Guarantees:
//   - Every phase of a size (passthrough, score stage, advantage stage and
//     their floors) runs on the same deterministic records and the same
//     broker, so their rates and CPU per record are comparable; ratios are
//     against the passthrough.
//   - The embedded broker and the instant scorer that stands in for GPU pods
//     run in child processes of this executable (BrokerCmd, ScorerCmd), so
//     their CPU is measured apart from the stages', and they die with the
//     bench.
//   - Each run's topics and consumer groups carry a prefix of their own, and
//     a phase's topics are deleted once nothing reads them, so runs against
//     one cluster (--brokers) never meet.
//   - With --json the last line of stdout is one JSON object (BenchResult)
//     whose names are stable.
//
// Where things are: bench.go the command, its options, the results and the
// run of one size; records.go the sizes and their records; phases.go the
// phases and how they are measured; floor.go the stages' floors (their
// input read, their output written, no work); latency.go the advantage stage's added
// latency and memory per open group; scaling.go the replica scaling table;
// trainer.go and trainer.py the trainer phase; broker.go, instant.go and
// child.go the child processes; counting.go the registry that counts what
// the stages export.
package bench
