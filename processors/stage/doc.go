// Package stage runs the two streaming stages of creditflow on Kafka
// (docs/stream.md): the score stage (ScoreStage) reads trajectories, asks a
// scorer for what the configured credit method needs (credit.Lookup: LAPO's
// rows, AttnSR's step graphs, or nothing) and writes scored trajectories; the
// advantage stage (AdvantageStage) groups scored trajectories by prompt_id
// and writes one training sample per trajectory.
//
// The advantage stage is the I/O around a pure core: for each record it
// decodes and validates (advantage_handle.go), hands the member to its
// partition's state.Partition, and acts on each decision it returns —
// samples built by package samples and written in the background
// (advantage_output.go), dead letters with their reason and original bytes
// (deadletter.go), acknowledgements, snapshots and commits. The groups, the
// ledger and the EMA baseline live in the core, which `creditflow compute`
// runs too.
//
// Guarantees: an input offset is committed only after every output it
// caused (scored record, sample or dead letter) is acknowledged, so a crash
// or rebalance replays work and never loses it; bad input never stops a
// partition and is never dropped silently (docs/guarantees.md); the same
// input and configuration give the same samples, bit for bit, as
// `creditflow compute` on the scored records.
package stage
