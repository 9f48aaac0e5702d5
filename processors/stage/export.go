package stage

import (
	"github.com/creditflow/creditflow/processors/offline"
	"github.com/creditflow/creditflow/schemas"
)

// ComputeInput turns a scored record into the input object of
// `creditflow compute` (docs/offline.md), so a topic can be replayed offline and
// checked against the stream.
func ComputeInput(s *schemas.Scored) offline.Input {
	m := member(s)
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
		in.Attention = append(in.Attention, offline.InputLayer{Layer: l.Layer, AA: l.AA, AO: l.AO})
	}
	return in
}
