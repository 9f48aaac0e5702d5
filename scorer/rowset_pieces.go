package scorer

// Compact row sets: rows whose context is pieces of the set's tokens (the
// protocol's row_pieces feature).

import "fmt"

// RowPieces is row j's pieces, nil when the row carries its Context.
func (s *RowSet) RowPieces(j int) []Piece {
	if j < len(s.Pieces) {
		return s.Pieces[j]
	}
	return nil
}

// ContextLen is the length of row j's context (its pieces' lengths added
// up, for a compact row).
func (s *RowSet) ContextLen(j int) int { return s.rowContextLen(j) }

// rowContextLen is the length of row j's context.
func (s *RowSet) rowContextLen(j int) int {
	ps := s.RowPieces(j)
	if ps == nil {
		return len(s.Rows[j].Context)
	}
	n := 0
	for _, p := range ps {
		if p.Literal != nil {
			n += len(p.Literal)
		} else {
			n += p.End - p.Start
		}
	}
	return n
}

// AppendRowContext appends row j's context to dst (a compact row's pieces
// resolved against the set's tokens).
func (s *RowSet) AppendRowContext(dst []int32, j int) ([]int32, error) {
	ps := s.RowPieces(j)
	if ps == nil {
		return append(dst, s.Rows[j].Context...), nil
	}
	for k, p := range ps {
		if p.Literal != nil {
			dst = append(dst, p.Literal...)
			continue
		}
		if p.Start < 0 || p.End < p.Start || p.End > len(s.Tokens) {
			return nil, fmt.Errorf("set %q row %d piece %d: span [%d, %d) is outside the set's %d tokens", s.ID, j, k, p.Start, p.End, len(s.Tokens))
		}
		dst = append(dst, s.Tokens[p.Start:p.End]...)
	}
	return dst, nil
}

// ExpandSet returns s with every row's Context materialized and no pieces
// (s itself when it has none).
func ExpandSet(s RowSet) (RowSet, error) {
	if s.Pieces == nil {
		return s, nil
	}
	out := RowSet{ID: s.ID, Rows: make([]Row, len(s.Rows)), Statistic: s.Statistic}
	for j, r := range s.Rows {
		if s.RowPieces(j) != nil {
			c, err := s.AppendRowContext(make([]int32, 0, s.rowContextLen(j)), j)
			if err != nil {
				return RowSet{}, err
			}
			r.Context = c
		}
		out.Rows[j] = r
	}
	return out, nil
}

// TokenCount is the set's work in tokens: context plus target of every row
// (a compact row counted expanded), plus its reference context if any.
func (s *RowSet) TokenCount() int {
	n := 0
	for j, r := range s.Rows {
		n += s.rowContextLen(j) + len(r.Target) + len(r.ReferenceContext)
	}
	return n
}
