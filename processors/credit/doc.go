// Package credit is the math of creditflow: it turns a group of scored
// trajectories into per-turn and per-token advantages with LAPO (docs/method.md §2)
// or AttnSR (docs/method.md §3). It does no I/O and knows nothing of Kafka.
//
// Credit methods are registered by name (Register, Lookup): what the score
// stage asks the scorer for, the method's member checks and its group
// computation. LAPO and AttnSR are registered in registry.go; a new method
// is one file with one Register call (docs/method.md, "Adding a credit
// method"). Config.Validate accepts the registered names.
//
// Guarantees:
//   - Pure and deterministic: the same members, configuration and EMA state
//     give the same results, bit for bit. The offline `creditflow compute`
//     command calls ComputeGroup and the streaming advantage stage
//     ComputeValidatedGroup (the same computation on members it validated
//     when they arrived), so they agree exactly.
//   - Every number is finite for valid input: ValidateMember and
//     Config.Validate reject what could produce NaN or ±Inf (non-finite
//     rewards or graph entries, zero ε, zero temperature) with an error that
//     names the field; non-finite LAPO gains Δ are replaced by 0 as docs/method.md
//     §2.1 says.
//   - ComputeGroup performs exactly one EMA update per AttnSR group and none
//     for LAPO, and none when it returns an error.
//   - No panics for bad input; errors say what is wrong and what to do.
//
// Each equation step is one exported function on plain slices, named after
// the step and commented with its docs/method.md section, so each can be checked
// against its equation: Normalize, F1, OutcomeAdvantages (§1); Tau,
// BoundedGains, Center, Gate, ProcessAdvantage, TokenAdvantage (§2.2);
// StepGraph, Backtrack, Recency, Softmax, Fuse, FocusMass, Focus,
// Consensus (§3.2); EMA, Budget, StepRewards, StepWeights,
// NormalizedWeights, ReweightedAdvantage (§3.3). docs/method.md explains
// every choice the papers leave open and every default.
package credit
