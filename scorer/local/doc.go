// Package local is the in-process reference scorer: a scorer.Scorer that runs
// a scorer/cpumodel.Model in this process, for the demo, tests, `creditflow
// scorer` (behind package server) and a processor that scores without pods.
//
// Guarantees:
//   - Scores and step graphs are the model's own, exactly: a call of many
//     sets equals one set at a time, and rows that share a prefix (within a
//     set and across sets of one prompt) are forwarded once.
//   - Invalid input gives a *scorer.RejectedError naming the set or job at
//     fault, before any model work.
//   - It is safe for concurrent use; at most MaxConcurrent model calls run
//     at once, further callers wait and give up when their context ends.
//   - Swap replaces the weights atomically: every call runs start to end on
//     the model it started with, so calls in flight during a swap neither
//     fail nor mix weights, and each answer carries the policy version of
//     the weights that computed it.
//   - ScoreRows reports the tokens the model forwarded (scorer.Usage);
//     Attention answers K×K or lower graphs (scorer.NewAttentionResult cuts
//     them by the same rule as a pod).
//
// Where things are: local.go the Scorer, its options and metrics;
// validate.go the input checks (expansion of compact sets, the model's
// limits), which a scorer pod repeats (scorer/gpupod/cfpod/protocol.py).
package local
