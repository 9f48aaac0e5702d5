// Package state holds the processor's state and the rules that make it safe
// to lose: commit watermarks, windowed groups keyed by prompt_id, the AttnSR
// EMA baseline and the per-partition snapshot that carries them across
// restarts and rebalances.
//
// Guarantees, in the order they matter:
//
//   - An input offset is committable only when every output it caused has been
//     acknowledged (Watermark). A crash therefore replays, never skips.
//   - A group's window is driven by event time (the members' creation time), so
//     a replay of a partition closes the same groups at the same records and
//     reproduces every EMA baseline R̄_t. Only when a partition is idle does
//     processing time close a window (see Groups.AdvanceIdle).
//   - The Snapshot of a partition records the EMA baseline and the groups
//     already emitted whose members lie beyond the committed offset, so that a
//     restarted processor skips what it already emitted and applies their EMA
//     updates at the same positions as a processor that never stopped.
package state
