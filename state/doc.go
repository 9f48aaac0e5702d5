// Package state holds the processor's state and the rules that make it safe
// to lose: the pure core of an input partition of the advantage stage
// (Partition), the windowed groups keyed by prompt_id it keeps (Groups), its
// ledger of offsets in flight and groups closed (Ledger, Watermark), the
// AttnSR EMA baseline (EMA, the one type the math updates and the
// snapshot carries) and the per-partition snapshot that carries them across
// restarts and rebalances. Nothing here does I/O or keeps metrics.
//
// One scored record through the advantage stage: the stage decodes it and
// calls Partition.Handle, which returns the decisions the record caused, in
// order (groups whose windows expired before it, replayed closes, the
// member's own: hold, finalize, duplicate, late, size mismatch); the stage
// acts on each (writes samples or dead letters, acknowledges, commits).
// `creditflow compute` runs the same Partition without a window (NewBatch),
// so the stream and compute group, close and update the baseline by the
// same code.
//
// Guarantees, in the order they matter:
//
//   - An input offset is committable only when every output it caused has been
//     acknowledged (Watermark). A crash therefore replays, never skips.
//   - A group's window is driven by event time (the members' creation time), so
//     a replay of a partition closes the same groups at the same records and
//     reproduces every EMA baseline R̄_t. Only when a partition is idle does
//     processing time close a window (Partition.Idle, Groups.AdvanceIdle).
//   - The Snapshot of a partition records the EMA baseline and the groups
//     already emitted whose members lie beyond the committed offset, so that a
//     restarted processor skips what it already emitted and applies their EMA
//     updates at the same positions as a processor that never stopped
//     (Partition's Replayed decisions).
//   - A group the computation refuses leaves the EMA baseline as it was.
package state
