// Package monitor watches an RL run's rewards as they happen: it reads one or
// more samples topics and the dead-letter topic and serves live aggregates —
// reward mean and success rate by policy version and over event time, reward
// and advantage distributions, zero-variance groups and pass@G, lengths,
// LAPO and AttnSR signals, sample age and policy lag, throughput and dead
// letters — as a web page, as JSON (GET /api/v1/summary) and on /metrics.
//
// Guarantees:
//
//   - It never commits: every partition is read by its own reader without a
//     consumer group, so no processing group's offsets move.
//   - Memory is fixed whatever the length of the run: duplicates are found in
//     a bounded window of trajectory ids, open groups are bounded, a bounded
//     number of policy-version rows is kept (the newest), histograms have
//     fixed bins and time series a fixed number of buckets.
//   - A duplicate of a sample (same trajectory_id, as at-least-once delivery
//     allows) is counted once; a group is counted once.
//   - A record that is not a decodable sample is counted and skipped, never
//     a crash.
//
// The aggregation (Aggregator) is plain code with no I/O; reading (Source)
// and serving (Monitor.Handler) are separate. See docs/monitor.md.
package monitor
