package local

// The input before any model work: compact sets expanded, then checked
// against the model's limits.

import (
	"math"

	"github.com/creditflow/creditflow/scorer"
)

// expandSets applies scorer.ExpandSet to every set; the error names the set.
func expandSets(sets []scorer.RowSet) ([]scorer.RowSet, error) {
	var out []scorer.RowSet
	for i, s := range sets {
		if s.Pieces == nil {
			if out != nil {
				out[i] = s
			}
			continue
		}
		if out == nil {
			out = make([]scorer.RowSet, len(sets))
			copy(out, sets[:i])
		}
		e, err := scorer.ExpandSet(s)
		if err != nil {
			return nil, scorer.Reject(i, s.ID, "%v", err)
		}
		out[i] = e
	}
	if out == nil {
		return sets, nil
	}
	return out, nil
}

// validateSets checks rows against the model limits, and every set's
// statistic and reference contexts; it returns a *scorer.RejectedError for the
// first bad set.
func validateSets(info scorer.ModelInfo, sets []scorer.RowSet) error {
	if err := scorer.CheckStatistics(sets); err != nil {
		return err
	}
	for i, s := range sets {
		if len(s.Rows) == 0 {
			return scorer.Reject(i, s.ID, "set %d has no rows", i)
		}
		for j, r := range s.Rows {
			a, b := r.Span[0], r.Span[1]
			if a < 0 || b > len(r.Target) || a >= b {
				return scorer.Reject(i, s.ID, "set %d row %d: span [%d, %d) is not a non-empty range inside the target of %d tokens", i, j, a, b, len(r.Target))
			}
			if len(r.Context) == 0 && a == 0 {
				return scorer.Reject(i, s.ID, "set %d row %d: empty context and span starting at 0: the first scored token needs a token before it", i, j)
			}
			if k, ok := badToken(r.Context, info.VocabSize); !ok {
				return scorer.Reject(i, s.ID, "set %d row %d: context token %d (index %d) is outside the vocabulary [0, %d)", i, j, r.Context[k], k, info.VocabSize)
			}
			if k, ok := badToken(r.ReferenceContext, info.VocabSize); !ok {
				return scorer.Reject(i, s.ID, "set %d row %d: reference token %d (index %d) is outside the vocabulary [0, %d)", i, j, r.ReferenceContext[k], k, info.VocabSize)
			}
			if k, ok := badToken(r.Target, info.VocabSize); !ok {
				return scorer.Reject(i, s.ID, "set %d row %d: target token %d (index %d) is outside the vocabulary [0, %d)", i, j, r.Target[k], k, info.VocabSize)
			}
			if info.MaxContext > 0 && len(r.Target) > info.MaxContext {
				return scorer.Reject(i, s.ID, "set %d row %d: target of %d tokens alone exceeds the model's max context %d", i, j, len(r.Target), info.MaxContext)
			}
			if temp := r.Temperature; math.IsNaN(temp) || math.IsInf(temp, 0) || temp < 0 {
				return scorer.Reject(i, s.ID, "set %d row %d: temperature %v must be finite and > 0 (0 means 1)", i, j, temp)
			}
		}
	}
	return nil
}

// validateJobs checks attention jobs against the model limits.
func validateJobs(info scorer.ModelInfo, jobs []scorer.AttentionJob) error {
	for i, jb := range jobs {
		n := len(jb.Tokens)
		if n == 0 {
			return scorer.Reject(i, jb.ID, "job %d has no tokens", i)
		}
		if info.MaxContext > 0 && n > info.MaxContext {
			return scorer.Reject(i, jb.ID, "job %d has %d tokens, more than the model's max context %d", i, n, info.MaxContext)
		}
		if k, ok := badToken(jb.Tokens, info.VocabSize); !ok {
			return scorer.Reject(i, jb.ID, "job %d: token %d (index %d) is outside the vocabulary [0, %d)", i, jb.Tokens[k], k, info.VocabSize)
		}
		if len(jb.Steps) == 0 {
			return scorer.Reject(i, jb.ID, "job %d has no steps", i)
		}
		end := 0
		for k, st := range jb.Steps {
			s, e := st.Action[0], st.Action[1]
			if s < end || e < s || e > n {
				return scorer.Reject(i, jb.ID, "job %d step %d: action range [%d, %d) must lie after the previous step (%d) and inside the %d tokens, start <= end", i, k, s, e, end, n)
			}
			end = e
			os, oe := st.Observation[0], st.Observation[1]
			if oe != os {
				if os < end || oe < os || oe > n {
					return scorer.Reject(i, jb.ID, "job %d step %d: observation range [%d, %d) must follow the action (%d) and lie inside the %d tokens", i, k, os, oe, end, n)
				}
				end = oe
			}
		}
		if len(jb.Layers) == 0 {
			return scorer.Reject(i, jb.ID, "job %d asks for no layers", i)
		}
		for _, l := range jb.Layers {
			if l < 0 || l >= info.Layers {
				return scorer.Reject(i, jb.ID, "job %d: layer %d is outside the model's layers [0, %d)", i, l, info.Layers)
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
