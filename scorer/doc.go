// Package scorer is the vocabulary of creditflow's scorer layer: the Scorer
// interface, the work it takes and gives back, and the errors every scorer
// returns.
//
// Guarantees, of every Scorer:
//   - The in-process scorer, the protocol client and any conforming pod give
//     the same numbers for the same model: scores and step graphs travel as
//     exact JSON floats (or their float64 bits), and a batch of many sets
//     equals one set at a time.
//   - Invalid input (a token outside the vocabulary, a span or step range out
//     of bounds, a request over a server limit that cannot be split) surfaces
//     as *RejectedError: the record is at fault, dead-letter it. Configuration
//     faults (authentication, protocol version) surface as *StatusError.
//     Everything else is retried by the client on another endpoint and, when
//     the retries run out, returned as an ordinary error: the stage should
//     back off and try again, not dead-letter.
//   - Every call honours its context: when it ends, the call returns ctx.Err().
//   - Results are in the order of the inputs.
//
// One interface, no optional ones: every Scorer answers Info, ScoreRows
// (scores and the call's token usage) and Attention (step graphs K×K or below
// their diagonals, AttentionOptions, with the policy version of the weights
// that computed them). Callers never type-switch a scorer; a wrapper that
// embeds a Scorer keeps all of it.
//
// The layer, one concern per package; arrows point down (implementation →
// vocabulary), none back up:
//
//	scorer                     the vocabulary: Scorer, Row, Step, StepGraph, Usage,
//	                           RowSet, RowScores, AttentionJob, AttentionResult,
//	                           ModelInfo, the statistics, errors; imports no
//	                           package of the layer (only internal/stepgraph,
//	                           the compact graph form it shares with the records)
//	scorer/protocol            the creditflow.scorer/v1 wire (docs/scorer-protocol.md): JSON
//	                           and binary bodies, compact rows; imports only scorer
//	scorer/client              the Scorer that talks to scorer pods: batching, endpoints,
//	                           retries, model info, metrics; imports scorer and scorer/protocol
//	scorer/server              serves any Scorer over the protocol; imports scorer and
//	                           scorer/protocol, never scorer/client
//	scorer/local               the in-process reference Scorer on a cpumodel.Model;
//	                           imports scorer and scorer/cpumodel
//	scorer/cpumodel            the CPU reference transformer (Llama/Qwen2/Qwen3 forward,
//	                           docs/model.md); imports scorer for its rows and graphs
//	scorer/cpumodel/safetensors  the checkpoint file format; imports nothing of the layer
//	scorer/gpupod              the Python GPU scorer pod (cfpod) and its tests
//	scorer/hfcheck             both scorers checked against Hugging Face transformers
//
// This package: scorer.go holds the Scorer interface and the row types;
// attention.go the attention job, options and result (NewAttentionResult,
// CutGraphs: how a scorer that computes K×K graphs answers); errors.go the
// errors and their codes (shared with the protocol's error body); tokens.go
// token arrays and compact-row pieces, with their JSON form; rowset_pieces.go
// compact row sets (ExpandSet); statistics.go the statistics a set may ask
// for (RowSet.Statistic, FeatureStatistics). The tests next to it (package
// scorer_test) check the guarantees end to end: the client against servers
// over the in-process scorer, and any running pod against the reference
// (TestConformance).
package scorer
