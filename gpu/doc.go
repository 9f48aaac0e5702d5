// Package gpu is creditflow's scorer layer: the Scorer interface, the
// in-process reference scorer (Local), and the creditflow.scorer/v1 HTTP
// protocol's server (Server) and client (Client). The protocol is specified
// in docs/scorer-protocol.md so that a GPU scorer pod in another language can
// implement the server side.
//
// Guarantees:
//   - Local, Client and any conforming pod give the same numbers for the same
//     model: scores and step graphs travel as exact JSON floats, and a batch of
//     many sets equals one set at a time.
//   - Invalid input (a token outside the vocabulary, a span or step range out
//     of bounds, a request over a server limit that cannot be split) surfaces
//     as *RejectedError: the record is at fault, dead-letter it. Configuration
//     faults (authentication, protocol version) surface as *StatusError.
//     Everything else is retried by the Client on another endpoint and, when
//     the retries run out, returned as an ordinary error: the stage should
//     back off and try again, not dead-letter.
//   - Every call honours its context: when it ends, the call returns ctx.Err().
//
// The Client coalesces work from concurrent callers (one per trajectory)
// into requests bounded by a token budget and a maximum wait, balances them
// over endpoints by tokens in flight, retries failures with exponential
// backoff and jitter, and takes endpoints out of rotation after consecutive
// failures until their /healthz answers again.
//
// Reading the Client: client.go holds its public surface (NewClient,
// ScoreRows, Attention, Close, Stats); client_options.go the options;
// client_batch.go the coalescing; client_retry.go the retries, rejections and
// 413 splits; client_wire.go one request attempt (encoding, classification of
// the answer, decoding); client_endpoints.go balancing and health probes;
// client_info.go the model-info check; client_metrics.go the metrics.
package gpu
