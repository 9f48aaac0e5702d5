package gpu

import (
	"fmt"
	"math"
	"net/http"
)

// RejectedError means a scorer refused the input itself (HTTP 400 or 413):
// a row span out of range, a token id outside the vocabulary, a set too
// large for any request... Retrying cannot help; the caller should
// dead-letter the record it came from. Find it with errors.As.
type RejectedError struct {
	Code     string // CodeBadRequest, CodeTooLarge or CodeOutOfMemory
	Message  string // what was wrong
	ID       string // id of the set or job at fault, when known
	Item     int    // index of that set or job in the call, -1 when unknown
	Endpoint string // endpoint that rejected it; empty for Local

	chunk *item // the client work item it belongs to (client bookkeeping)
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

func rejectf(item int, id, format string, args ...any) *RejectedError {
	return &RejectedError{Code: CodeBadRequest, Item: item, ID: id, Message: fmt.Sprintf(format, args...)}
}

// validateSets checks rows against the model limits; it returns a
// *RejectedError for the first bad set.
func validateSets(info ModelInfo, sets []RowSet) error {
	for i, s := range sets {
		if len(s.Rows) == 0 {
			return rejectf(i, s.ID, "set %d has no rows", i)
		}
		for j, r := range s.Rows {
			a, b := r.Span[0], r.Span[1]
			if a < 0 || b > len(r.Target) || a >= b {
				return rejectf(i, s.ID, "set %d row %d: span [%d, %d) is not a non-empty range inside the target of %d tokens", i, j, a, b, len(r.Target))
			}
			if len(r.Context) == 0 && a == 0 {
				return rejectf(i, s.ID, "set %d row %d: empty context and span starting at 0: the first scored token needs a token before it", i, j)
			}
			if k, ok := badToken(r.Context, info.VocabSize); !ok {
				return rejectf(i, s.ID, "set %d row %d: context token %d (index %d) is outside the vocabulary [0, %d)", i, j, r.Context[k], k, info.VocabSize)
			}
			if k, ok := badToken(r.Target, info.VocabSize); !ok {
				return rejectf(i, s.ID, "set %d row %d: target token %d (index %d) is outside the vocabulary [0, %d)", i, j, r.Target[k], k, info.VocabSize)
			}
			if info.MaxContext > 0 && len(r.Target) > info.MaxContext {
				return rejectf(i, s.ID, "set %d row %d: target of %d tokens alone exceeds the model's max context %d", i, j, len(r.Target), info.MaxContext)
			}
			if temp := r.Temperature; math.IsNaN(temp) || math.IsInf(temp, 0) || temp < 0 {
				return rejectf(i, s.ID, "set %d row %d: temperature %v must be finite and > 0 (0 means 1)", i, j, temp)
			}
		}
	}
	return nil
}

// validateJobs checks attention jobs against the model limits.
func validateJobs(info ModelInfo, jobs []AttentionJob) error {
	for i, jb := range jobs {
		n := len(jb.Tokens)
		if n == 0 {
			return rejectf(i, jb.ID, "job %d has no tokens", i)
		}
		if info.MaxContext > 0 && n > info.MaxContext {
			return rejectf(i, jb.ID, "job %d has %d tokens, more than the model's max context %d", i, n, info.MaxContext)
		}
		if k, ok := badToken(jb.Tokens, info.VocabSize); !ok {
			return rejectf(i, jb.ID, "job %d: token %d (index %d) is outside the vocabulary [0, %d)", i, jb.Tokens[k], k, info.VocabSize)
		}
		if len(jb.Steps) == 0 {
			return rejectf(i, jb.ID, "job %d has no steps", i)
		}
		end := 0
		for k, st := range jb.Steps {
			s, e := st.Action[0], st.Action[1]
			if s < end || e < s || e > n {
				return rejectf(i, jb.ID, "job %d step %d: action range [%d, %d) must lie after the previous step (%d) and inside the %d tokens, start <= end", i, k, s, e, end, n)
			}
			end = e
			os, oe := st.Observation[0], st.Observation[1]
			if oe != os {
				if os < end || oe < os || oe > n {
					return rejectf(i, jb.ID, "job %d step %d: observation range [%d, %d) must follow the action (%d) and lie inside the %d tokens", i, k, os, oe, end, n)
				}
				end = oe
			}
		}
		if len(jb.Layers) == 0 {
			return rejectf(i, jb.ID, "job %d asks for no layers", i)
		}
		for _, l := range jb.Layers {
			if l < 0 || l >= info.Layers {
				return rejectf(i, jb.ID, "job %d: layer %d is outside the model's layers [0, %d)", i, l, info.Layers)
			}
		}
	}
	return nil
}

func badToken(ids []int32, vocab int) (int, bool) {
	if vocab <= 0 {
		return 0, true
	}
	for k, id := range ids {
		if id < 0 || int(id) >= vocab {
			return k, false
		}
	}
	return 0, true
}
