// Package client is the scorer.Scorer that talks to scorer pods over the
// creditflow.scorer/v1 protocol (package protocol, docs/scorer-protocol.md).
// It depends on the protocol, never on the server.
//
// Guarantees:
//   - Results are in the order of the inputs and equal what the pod computed
//     (floats travel in their shortest exact JSON form, or bit for bit in
//     binary bodies). Each body goes in the most compact form the endpoint
//     advertises in /v1/info (compact rows, binary requests and answers,
//     lower graphs); Attention with scorer.AttentionOptions.Lower gives the
//     same bits whether the pod cut its graphs below the diagonal or the
//     client did.
//   - ScoreRows reports no usage of its own (scorer.Usage{}): a request
//     carries the sets of many calls; the pods' usage goes into the
//     client's metrics.
//   - Work from concurrent callers (one per trajectory) is coalesced into
//     requests of at most a token budget, waiting at most a maximum wait for
//     company; a single set or job larger than the budget goes alone.
//   - A request goes to the healthy endpoint with the least tokens in flight.
//     Connection errors, timeouts, 5xx and 429 are retried on another
//     endpoint with exponential backoff and full jitter; when the retries run
//     out the error wraps ErrUnavailable. 4xx are never retried: a 400/413
//     reaches only the caller whose input caused it, as a *scorer.RejectedError;
//     401/403 and version mismatches surface as *scorer.StatusError.
//   - A caller whose context ends gets ctx.Err() at once; a request whose
//     callers have all gone is cancelled. After Close every call gets
//     ErrClosed.
//   - An endpoint that keeps failing is taken out of rotation until its
//     /healthz answers again and it reports the same model.
//
// Reading the client: client.go holds its public surface (New, ScoreRows,
// Attention, Close, Stats); options.go the options; batch.go the
// coalescing; retry.go the retries, rejections and 413 splits; wire.go one
// request attempt (encoding, classification of the answer, decoding);
// endpoints.go balancing and health probes; info.go the model-info check
// (Info).
// Its metrics (creditflow_scorer_*) are defined in scorer/internal/scorermetrics,
// shared with the in-process scorer.
package client
