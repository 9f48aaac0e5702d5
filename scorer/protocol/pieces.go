package protocol

// Compact rows (FeatureRowPieces): the server's checks and sizing of the
// wire form.

import "github.com/creditflow/creditflow/scorer"

// FeatureRowPieces is the /v1/info feature of a server that accepts compact
// score rows: set-level "tokens", "target" and "span", and rows that give
// their context as "pieces" (docs/scorer-protocol.md, "Compact rows").
const FeatureRowPieces = "row_pieces"

// ResolveSets checks compact rows and gives every row its target and
// span, in place, leaving pieces as they are (the scorer expands them, see
// scorer.ExpandSet: a Scorer takes compact sets): a row without a target takes its
// set's target and span. Invalid pieces (a span out of [0, len(tokens)] or
// reversed, pieces and a context in one row) and a row without a span are a
// bad request naming the set and row.
func ResolveSets(req *ScoreRequest) error {
	for i := range req.Sets {
		s := &req.Sets[i]
		for j := range s.Rows {
			r := &s.Rows[j]
			if r.Pieces != nil {
				if r.Context != nil {
					return scorer.Reject(i, s.ID, "set %d row %d has both \"context\" and \"pieces\"; send one", i, j)
				}
				for k, p := range r.Pieces {
					if p.Literal == nil && (p.Start < 0 || p.End < p.Start || p.End > len(s.Tokens)) {
						return scorer.Reject(i, s.ID, "set %d row %d piece %d: span [%d, %d) is not a range inside the set's %d tokens (0 <= start <= end <= len)",
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
				return scorer.Reject(i, s.ID, "set %d row %d has no span (give one in the row or, with the set's target, in the set)", i, j)
			}
		}
	}
	return nil
}

// RowTokens is the row's context plus target (plus reference) in tokens once expanded
// (span pieces are clamped to the set's tokens: this only sizes the work).
func RowTokens(s *WireRowSet, r *WireRow) int {
	n := len(r.Context) + len(r.Target) + len(r.Reference)
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
