package samples

import (
	"slices"
	"strings"

	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/schemas"
)

// ComputeInput turns a scored record into the input object of
// `creditflow compute` (docs/offline.md), so a topic can be replayed offline and
// checked against the stream.
func ComputeInput(s *schemas.Scored) offline.Input {
	m := Member(s)
	size := m.GroupSize
	in := offline.Input{
		TrajectoryID: m.TrajectoryID, PromptID: m.PromptID, GroupSize: &size,
		Reward: m.Reward, PredAnswer: m.PredAnswer, GoldAnswers: m.GoldAnswers, PromptTokens: m.PromptTokens,
	}
	for _, t := range m.Turns {
		in.Turns = append(in.Turns, offline.InputTurn{Kind: t.Kind, ActionTokens: t.ActionTokens,
			ObservationTokens: t.ObservationTokens, Delta: t.Delta})
	}
	for _, l := range m.Attention {
		in.Attention = append(in.Attention, offline.InputLayer{Layer: l.Layer, AA: square(l.AA), AO: square(l.AO), Sum: square(l.Sum)})
	}
	if s.Method == schemas.MethodLAPO && strings.Contains(s.Direction, ":") {
		in.Direction = s.Direction // Δ of the entropy or kl statistic; logprob lines stay as they were
	}
	return in
}

// square gives a graph's rows all K columns, zeros on and above the
// diagonal where a row holds only the entries left of it (compact graphs),
// so that an export is the same whichever generation wrote the record.
func square(rows [][]float64) [][]float64 {
	k := len(rows)
	out := rows
	for j, row := range rows {
		if len(row) == k {
			continue
		}
		if &out[0] == &rows[0] {
			out = slices.Clone(rows)
		}
		full := make([]float64, k)
		copy(full, row)
		out[j] = full
	}
	return out
}
