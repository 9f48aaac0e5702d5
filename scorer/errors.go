package scorer

import (
	"fmt"
	"net/http"
)

// Error codes: the Code of a RejectedError or StatusError, and the "code"
// of the protocol's error body {"error": "...", "code": "..."}.
const (
	CodeBadRequest      = "bad_request"      // 400: invalid input; do not retry
	CodeVersionMismatch = "version_mismatch" // 400: protocol header missing or different
	CodeUnauthorized    = "unauthorized"     // 401: missing or wrong bearer token
	CodeForbidden       = "forbidden"        // 403
	CodeNotFound        = "not_found"        // 404
	CodeMethod          = "method_not_allowed"
	CodeTooLarge        = "too_large"     // 413: request bytes, rows or tokens over the server's limits
	CodeOutOfMemory     = "out_of_memory" // 413: the request did not fit the accelerator's memory (see below)
	CodeOverloaded      = "overloaded"    // 503: too many concurrent requests; retry elsewhere/later
	CodeInternal        = "internal"      // 500
)

// An out_of_memory answer's message names the size that has fit. The client splits the
// request like any 413 and rejects a single set or job that still does not fit with a
// *RejectedError of code CodeOutOfMemory: that record is too large for the scorer's
// accelerator, and resending it would fail the same way.

// RejectedError means a scorer refused the input itself (HTTP 400 or 413):
// a row span out of range, a token id outside the vocabulary, a set too
// large for any request... Retrying cannot help; the caller should
// dead-letter the record it came from. Find it with errors.As.
type RejectedError struct {
	Code     string // CodeBadRequest, CodeTooLarge or CodeOutOfMemory
	Message  string // what was wrong
	ID       string // id of the set or job at fault, when known
	Item     int    // index of that set or job in the call, -1 when unknown
	Endpoint string // endpoint that rejected it; empty for the in-process scorer
}

func (e *RejectedError) Error() string {
	where := ""
	if e.ID != "" {
		where = fmt.Sprintf(" %q", e.ID)
	}
	src := "scorer"
	if e.Endpoint != "" {
		src = "scorer " + e.Endpoint
	}
	return fmt.Sprintf("%s rejected input%s (%s): %s; the input is invalid for this scorer and retrying will not help",
		src, where, e.Code, e.Message)
}

// StatusError is a non-retryable refusal that is not the input's fault:
// authentication (401/403), a protocol version mismatch, an unknown path. It
// points at configuration, not at a record: do not dead-letter on it.
type StatusError struct {
	Endpoint string
	Status   int
	Code     string
	Message  string
}

func (e *StatusError) Error() string {
	hint := ""
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		hint = "; check the bearer token given to the client and the server"
	}
	if e.Code == CodeVersionMismatch {
		hint = "; client and scorer speak different protocol versions, upgrade one of them"
	}
	return fmt.Sprintf("scorer %s answered %d %s: %s%s", e.Endpoint, e.Status, e.Code, e.Message, hint)
}

// Reject is the *RejectedError (CodeBadRequest) of the set or job at index
// item of a call (-1 when unknown), with its id and a message.
func Reject(item int, id, format string, args ...any) *RejectedError {
	return &RejectedError{Code: CodeBadRequest, Item: item, ID: id, Message: fmt.Sprintf(format, args...)}
}
