// Package protocol is the creditflow.scorer/v1 wire format, as specified in
// docs/scorer-protocol.md: what travels between the scorer client and a
// scorer pod, and nothing about how either end sends, retries or serves it.
// It imports only the scorer vocabulary (package scorer); the client and the
// server import it, never each other.
//
// Guarantees:
//   - Every body has one meaning whatever form carries it: a binary score
//     request (MediaTypeRows) decodes to exactly the ScoreRequest its JSON
//     form decodes to, the compact form of a set (FeatureRowPieces) scores
//     as the same rows sent in full, and a binary graphs answer
//     (MediaTypeGraphs) carries the JSON answer's float64 values bit for bit;
//     a binary attention request (MediaTypeJobs) decodes to exactly the
//     AttentionRequest of its JSON form, and a lower-graphs answer
//     (MediaTypeLowerGraphs) is exactly stepgraph.Cut of the K×K graphs.
//   - The hand-written encoders (AppendScoreRequest, AppendAttentionRequest)
//     write byte for byte what encoding/json writes for the same request.
//   - Floats round-trip exactly: a Score is the shortest decimal that reads
//     back as the same float64; a non-finite one travels as null.
//   - Decoders never panic and never allocate past the body they read: every
//     count is checked against the bytes that follow, and the server's row
//     and token limits apply while reading (a *scorer.RejectedError of
//     scorer.CodeTooLarge).
//
// Where things are:
//   - protocol.go: Version and Header, the endpoint paths, the JSON bodies
//     (ScoreRequest, ScoreResponse, AttentionRequest, AttentionResponse,
//     ErrorBody) and their conversions to and from the gpu types.
//   - encode.go: the JSON request bodies written straight from gpu types.
//   - binary.go: the binary bodies (FeatureBinary): the rows request and the
//     graphs answer, and content negotiation (IsMediaType, Accepts).
//   - jobs.go: the binary attention request (FeatureBinaryJobs).
//   - lower.go: the lower-graphs answer (FeatureLowerGraphs): each graph
//     below its diagonal, summed where exact, the scored record's form.
//   - pieces.go: compact rows (FeatureRowPieces): ResolveSets, RowTokens.
//   - statistics.go: the entropy and kl statistics (FeatureStatistics):
//     a set's statistic and kl rows' reference on the wire (their rules
//     are scorer.CheckStatistics, which the server applies).
//
// Token arrays travel as scorer.Tokens (base64 of little-endian int32) and
// compact-row pieces as scorer.Piece; both carry their JSON form with them.
// Error codes are the scorer.Code constants.
package protocol
