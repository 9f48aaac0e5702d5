// Package server serves any scorer.Scorer over the creditflow.scorer/v1
// protocol (package protocol, docs/scorer-protocol.md): the reference a
// scorer pod in another language is checked against. It depends on the
// protocol, never on the client.
//
// Guarantees:
//   - Every answer other than 200 carries a JSON protocol.ErrorBody and the
//     status the protocol assigns: 400 invalid input (with the index and id
//     of the set or job at fault), 401 authentication, 413 over a limit, 503
//     over the concurrency limit or shutting down, 500 otherwise. No input
//     reaches the scorer unchecked: a malformed body is a 400, never a 500.
//   - The limits (request bytes, rows, tokens, concurrent requests) are
//     checked before the scorer runs; requests over the concurrency limit
//     are refused at once, never queued.
//   - The bearer token is compared in constant time and never logged.
//   - ListenAndServe and Serve drain in-flight requests when their context
//     ends; while draining, /healthz answers 503.
//   - /livez comes from the model: 200 while a model call succeeded within
//     10 s or a request is being served, else a canary (one row of one
//     token) decides; 503 when it fails or takes over 5 s. Draining does not
//     fail it.
//   - An answer carries what the scorer's one call reports: the usage of
//     ScoreRows, and the policy version of Attention's graphs where the
//     scorer knows it (absent where it does not). The server asks for K×K
//     graphs and cuts them itself for a lower-graphs answer.
//
// Where things are: server.go the handlers (info, score, attention, health,
// metrics), the shared path of work requests (serveWork) and the mapping of
// scorer errors to statuses (errorStatus); live.go /livez; options.go the
// options and the server's metrics (creditflow_scorer_server_*).
package server
