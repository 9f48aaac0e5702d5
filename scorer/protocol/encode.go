package protocol

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/creditflow/creditflow/scorer"
)

// AppendScoreRequest appends the JSON of a ScoreRequest for sets, written
// directly (encoding/json re-scans and compacts the output of every
// MarshalJSON, which for the token arrays was most of the score stage's
// client cost). With compact false every row carries its full context (the
// bytes of json.Marshal(SetsToWire(expanded sets))); with compact true a set
// with pieces is sent in the compact form of FeatureRowPieces: its tokens
// once, the shared target and span once, each row as pieces.
func AppendScoreRequest(dst []byte, sets []scorer.RowSet, compact bool) ([]byte, error) {
	dst = append(dst, `{"sets":[`...)
	var buf []int32
	for i := range sets {
		s := &sets[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if s.ID != "" {
			id, err := json.Marshal(s.ID)
			if err != nil {
				return nil, err
			}
			dst = append(dst, `"id":`...)
			dst = append(dst, id...)
			dst = append(dst, ',')
		}
		if stat := wireStatistic(s.Statistic); stat != "" {
			st, err := json.Marshal(stat)
			if err != nil {
				return nil, err
			}
			dst = append(append(append(dst, `"statistic":`...), st...), ',')
		}
		pieces := compact && s.Pieces != nil
		shared := pieces && sharedTarget(s)
		if pieces {
			dst = append(dst, `"tokens":`...)
			dst = appendTokens(dst, s.Tokens)
			dst = append(dst, ',')
			if shared {
				dst = append(dst, `"target":`...)
				dst = appendTokens(dst, s.Rows[0].Target)
				dst = appendSpan(append(dst, `,"span":`...), s.Rows[0].Span)
				dst = append(dst, ',')
			}
		}
		dst = append(dst, `"rows":[`...)
		for j, r := range s.Rows {
			if j > 0 {
				dst = append(dst, ',')
			}
			if ps := s.RowPieces(j); pieces && ps != nil {
				dst = append(dst, `{"pieces":[`...)
				for k, p := range ps {
					if k > 0 {
						dst = append(dst, ',')
					}
					if p.Literal != nil {
						dst = appendTokens(dst, p.Literal)
					} else {
						dst = appendSpan(dst, [2]int{p.Start, p.End})
					}
				}
				dst = append(dst, ']')
			} else {
				ctx := r.Context
				if s.RowPieces(j) != nil {
					var err error
					if buf, err = s.AppendRowContext(buf[:0], j); err != nil {
						return nil, err
					}
					ctx = buf
				}
				// An empty array is left out, as encoding/json does
				// (absent is empty).
				dst = append(dst, '{')
				if len(ctx) > 0 {
					dst = appendTokens(append(dst, `"context":`...), ctx)
				}
			}
			// sep is the separator before the next field: none right
			// after the row's opening brace.
			sep := func() {
				if dst[len(dst)-1] != '{' {
					dst = append(dst, ',')
				}
			}
			if !shared {
				if len(r.Target) > 0 {
					sep()
					dst = appendTokens(append(dst, `"target":`...), r.Target)
				}
				sep()
				dst = appendSpan(append(dst, `"span":`...), r.Span)
			}
			if r.Temperature != 0 {
				temp, err := json.Marshal(r.Temperature)
				if err != nil {
					return nil, err
				}
				sep()
				dst = append(dst, `"temperature":`...)
				dst = append(dst, temp...)
			}
			if len(r.ReferenceContext) > 0 {
				sep()
				dst = appendTokens(append(dst, `"reference":`...), r.ReferenceContext)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...), nil
}

// sharedTarget reports whether every row of s has the first row's target
// and span (then the compact form sends them once, at set level).
func sharedTarget(s *scorer.RowSet) bool {
	if len(s.Rows) == 0 {
		return false
	}
	r0 := s.Rows[0]
	for _, r := range s.Rows[1:] {
		if r.Span != r0.Span || !slices.Equal(r.Target, r0.Target) {
			return false
		}
	}
	return true
}

func appendSpan(dst []byte, sp [2]int) []byte {
	dst = append(dst, '[')
	dst = strconv.AppendInt(dst, int64(sp[0]), 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(sp[1]), 10)
	return append(dst, ']')
}

// appendTokens appends t as Tokens.MarshalJSON writes it.
func appendTokens(dst []byte, t []int32) []byte {
	dst = append(dst, '"')
	// Whole 3-byte groups per chunk (768 tokens = 3072 bytes) keep the
	// chunks' base64 concatenable without padding in between.
	const chunk = 768
	raw := make([]byte, 0, 4*min(len(t), chunk))
	for len(t) > 0 {
		n := min(len(t), chunk)
		raw = raw[:4*n]
		for i, v := range t[:n] {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
		}
		dst = base64.StdEncoding.AppendEncode(dst, raw)
		t = t[n:]
	}
	return append(dst, '"')
}

// AppendAttentionRequest appends the JSON of an AttentionRequest for jobs,
// the bytes of json.Marshal(JobsToWire(jobs)), written directly: the
// token arrays are most of it, and encoding/json re-scans and compacts the
// output of every MarshalJSON.
func AppendAttentionRequest(dst []byte, jobs []scorer.AttentionJob) ([]byte, error) {
	dst = append(dst, `{"jobs":[`...)
	for i := range jobs {
		j := &jobs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if j.ID != "" {
			id, err := json.Marshal(j.ID)
			if err != nil {
				return nil, err
			}
			dst = append(append(append(dst, `"id":`...), id...), ',')
		}
		dst = appendTokens(append(dst, `"tokens":`...), j.Tokens)
		dst = append(dst, `,"steps":[`...)
		for k, s := range j.Steps {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendSpan(append(dst, `{"action":`...), s.Action)
			dst = append(dst, `,"observation":`...)
			if s.Observation[1] > s.Observation[0] {
				dst = appendSpan(dst, s.Observation)
			} else {
				dst = append(dst, "null"...)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
		dst = append(dst, `,"layers":`...)
		if j.Layers == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for k, l := range j.Layers {
				if k > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendInt(dst, int64(l), 10)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), nil
}
