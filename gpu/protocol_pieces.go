package gpu

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// FeatureRowPieces is the /v1/info feature of a server that accepts compact
// score rows: set-level "tokens", "target" and "span", and rows that give
// their context as "pieces" (docs/scorer-protocol.md, "Compact rows").
const FeatureRowPieces = "row_pieces"

// Piece is one piece of a compact row's context: either a half-open span
// [Start, End) into its set's Tokens (Literal nil) or literal token ids
// (Literal non-nil, e.g. the placeholder). On the wire a span is [s, e] and
// literal ids are a token array string.
type Piece struct {
	Start, End int
	Literal    Tokens
}

// MarshalJSON writes [s, e] or the literal ids' base64 string.
func (p Piece) MarshalJSON() ([]byte, error) {
	if p.Literal != nil {
		return p.Literal.MarshalJSON()
	}
	return []byte(fmt.Sprintf("[%d,%d]", p.Start, p.End)), nil
}

// UnmarshalJSON reads [s, e] or a token array string.
func (p *Piece) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var t Tokens
		if err := t.UnmarshalJSON(b); err != nil {
			return err
		}
		if t == nil {
			t = Tokens{}
		}
		*p = Piece{Literal: t}
		return nil
	}
	var r [2]int
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 2 {
		return fmt.Errorf("a piece must be [start, end] or a base64 token array, got %.30s", b)
	}
	for i := range raw {
		if err := json.Unmarshal(raw[i], &r[i]); err != nil {
			return fmt.Errorf("a piece must be [start, end] with integer bounds, got %.30s", b)
		}
	}
	*p = Piece{Start: r[0], End: r[1]}
	return nil
}

// resolveWireSets checks compact rows and gives every row its target and
// span, in place, leaving pieces as they are (the scorer expands them, see
// ExpandSet: a Scorer takes compact sets): a row without a target takes its
// set's target and span. Invalid pieces (a span out of [0, len(tokens)] or
// reversed, pieces and a context in one row) and a row without a span are a
// bad request naming the set and row.
func resolveWireSets(req *ScoreRequest) error {
	for i := range req.Sets {
		s := &req.Sets[i]
		for j := range s.Rows {
			r := &s.Rows[j]
			if r.Pieces != nil {
				if r.Context != nil {
					return rejectf(i, s.ID, "set %d row %d has both \"context\" and \"pieces\"; send one", i, j)
				}
				for k, p := range r.Pieces {
					if p.Literal == nil && (p.Start < 0 || p.End < p.Start || p.End > len(s.Tokens)) {
						return rejectf(i, s.ID, "set %d row %d piece %d: span [%d, %d) is not a range inside the set's %d tokens (0 <= start <= end <= len)",
							i, j, k, p.Start, p.End, len(s.Tokens))
					}
				}
			}
			if r.Target == nil && s.Target != nil {
				r.Target = s.Target
				if r.Span == nil {
					r.Span = s.Span
				}
			}
			if r.Span == nil {
				return rejectf(i, s.ID, "set %d row %d has no span (give one in the row or, with the set's target, in the set)", i, j)
			}
		}
	}
	return nil
}

// wireRowTokens is the row's context plus target in tokens once expanded
// (span pieces are clamped to the set's tokens: this only sizes the work).
func wireRowTokens(s *WireRowSet, r *WireRow) int {
	n := len(r.Context) + len(r.Target)
	if r.Target == nil {
		n += len(s.Target)
	}
	for _, p := range r.Pieces {
		if p.Literal != nil {
			n += len(p.Literal)
		} else if p.End > p.Start {
			n += min(p.End, len(s.Tokens)) - min(max(p.Start, 0), len(s.Tokens))
		}
	}
	return n
}
