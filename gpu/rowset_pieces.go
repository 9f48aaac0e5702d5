package gpu

import "fmt"

// rowPieces is row j's pieces, nil when the row carries its Context.
func (s *RowSet) rowPieces(j int) []Piece {
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
	ps := s.rowPieces(j)
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

// appendRowContext appends row j's context to dst.
func (s *RowSet) appendRowContext(dst []int32, j int) ([]int32, error) {
	ps := s.rowPieces(j)
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
	out := RowSet{ID: s.ID, Rows: make([]Row, len(s.Rows))}
	for j, r := range s.Rows {
		if s.rowPieces(j) != nil {
			c, err := s.appendRowContext(make([]int32, 0, s.rowContextLen(j)), j)
			if err != nil {
				return RowSet{}, err
			}
			r.Context = c
		}
		out.Rows[j] = r
	}
	return out, nil
}

// expandSets applies ExpandSet to every set; the error names the set.
func expandSets(sets []RowSet) ([]RowSet, error) {
	var out []RowSet
	for i, s := range sets {
		if s.Pieces == nil {
			if out != nil {
				out[i] = s
			}
			continue
		}
		if out == nil {
			out = make([]RowSet, len(sets))
			copy(out, sets[:i])
		}
		e, err := ExpandSet(s)
		if err != nil {
			return nil, rejectf(i, s.ID, "%v", err)
		}
		out[i] = e
	}
	if out == nil {
		return sets, nil
	}
	return out, nil
}
