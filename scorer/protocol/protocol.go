package protocol

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/creditflow/creditflow/scorer"
)

// Version names the wire protocol spoken by the server and the client
// (docs/scorer-protocol.md). It travels in scorer.ModelInfo.Protocol and in
// the Header of every request and response.
const Version = "creditflow.scorer/v1"

// Header is the HTTP header that carries Version.
const Header = "Creditflow-Scorer-Protocol"

// Paths of the protocol's endpoints.
const (
	PathInfo      = "/v1/info"
	PathScore     = "/v1/score"
	PathAttention = "/v1/attention"
	PathHealth    = "/healthz"
	PathLive      = "/livez" // liveness from the model (a canary when idle); optional for a server
	PathMetrics   = "/metrics"
)

// Score is a float64 that travels as a JSON number, or null when it is not
// finite (JSON has no NaN or infinities). null decodes as NaN.
type Score float64

// MarshalJSON writes the shortest representation that round-trips exactly.
func (s Score) MarshalJSON() ([]byte, error) {
	f := float64(s)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads a JSON number or null (NaN).
func (s *Score) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = Score(math.NaN())
		return nil
	}
	// encoding/json has checked that b is a JSON number, which ParseFloat
	// reads as encoding/json would (the nearest float64).
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || strings.Trim(string(b), "0123456789+-.eE") != "" { // not a plain decimal
		var v float64 // anything else (out of range, or not via a decoder) as encoding/json reads it
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		f = v
	}
	*s = Score(f)
	return nil
}

// WireRow is one LAPO row on the wire. Temperature is the rollout's sampling
// temperature: the row is scored with the logits divided by it. Absent (or
// null) means 1; a value that is not > 0 is a bad request.
//
// A compact row (FeatureRowPieces) gives Pieces instead of Context and may
// leave out Target and Span to take its set's. Reference is the second
// context of a row of a kl set (FeatureStatistics), always in full.
type WireRow struct {
	Context     scorer.Tokens  `json:"context,omitempty"`
	Pieces      []scorer.Piece `json:"pieces,omitempty"`
	Target      scorer.Tokens  `json:"target,omitempty"`
	Span        *[2]int        `json:"span,omitempty"`
	Temperature *float64       `json:"temperature,omitempty"`
	Reference   scorer.Tokens  `json:"reference,omitempty"`
}

// WireRowSet is one trajectory's rows on the wire. Tokens, Target and Span
// are the compact form's shared arrays (FeatureRowPieces): the tokens the
// rows' span pieces point into, and the target and span of every row that
// has none of its own. Statistic (FeatureStatistics) is "entropy" or "kl";
// absent means logprob, the scores of every scorer.
type WireRowSet struct {
	ID        string        `json:"id,omitempty"`
	Statistic string        `json:"statistic,omitempty"`
	Tokens    scorer.Tokens `json:"tokens,omitempty"`
	Target    scorer.Tokens `json:"target,omitempty"`
	Span      *[2]int       `json:"span,omitempty"`
	Rows      []WireRow     `json:"rows"`
}

// ScoreRequest is the body of POST /v1/score.
type ScoreRequest struct {
	Sets []WireRowSet `json:"sets"`
}

// WireUsage counts the tokens a request cost (see scorer.Usage).
type WireUsage struct {
	TokensForwarded int64 `json:"tokens_forwarded"`
	TokensRowByRow  int64 `json:"tokens_row_by_row"`
	Truncations     int64 `json:"truncations"`
	// Packs counts the model calls of tree packing that answered the request
	// and MaxPackTokens the tokens of the largest; a scorer that does not pack
	// (the Go scorer, the pod under --packing walk) leaves both out.
	Packs         int64 `json:"packs,omitempty"`
	MaxPackTokens int64 `json:"max_pack_tokens,omitempty"`
}

// WireRowScores answers one set.
type WireRowScores struct {
	Scores      []Score `json:"scores"`
	Truncations int     `json:"truncations"`
}

// ScoreResponse is the body of a 200 answer to POST /v1/score.
type ScoreResponse struct {
	Results []WireRowScores `json:"results"`
	Usage   WireUsage       `json:"usage"`
	// PolicyVersion is the policy version of the weights that computed
	// every result of this answer; absent when the server does not say.
	PolicyVersion *int64 `json:"policy_version,omitempty"`
}

// WireStep is one AttnSR step on the wire; Observation is null when absent.
type WireStep struct {
	Action      [2]int  `json:"action"`
	Observation *[2]int `json:"observation"`
}

// WireJob is one trajectory's step-graph job on the wire.
type WireJob struct {
	ID     string        `json:"id,omitempty"`
	Tokens scorer.Tokens `json:"tokens"`
	Steps  []WireStep    `json:"steps"`
	Layers []int         `json:"layers"`
}

// AttentionRequest is the body of POST /v1/attention.
type AttentionRequest struct {
	Jobs []WireJob `json:"jobs"`
}

// WireGraph is one layer's step graph: K×K arrays, row j = querying step.
type WireGraph struct {
	Layer int         `json:"layer"`
	AA    [][]float64 `json:"aa"`
	AO    [][]float64 `json:"ao"`
}

// WireJobResult answers one job.
type WireJobResult struct {
	Graphs []WireGraph `json:"graphs"`
}

// AttentionResponse is the body of a 200 answer to POST /v1/attention.
type AttentionResponse struct {
	Results []WireJobResult `json:"results"`
	// PolicyVersion: as in ScoreResponse.
	PolicyVersion *int64 `json:"policy_version,omitempty"`
}

// ErrorBody is the body of every non-200 answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Item is the zero-based index of the set or job at fault, when known.
	Item *int `json:"item,omitempty"`
	// ID is that set's or job's id, when known.
	ID string `json:"id,omitempty"`
}

// SetsToWire is the score request of sets in the full form (every row
// with its own context; compact sets must be expanded first).
func SetsToWire(sets []scorer.RowSet) ScoreRequest {
	req := ScoreRequest{Sets: make([]WireRowSet, len(sets))}
	for i, s := range sets {
		rows := make([]WireRow, len(s.Rows))
		for j, r := range s.Rows {
			span := r.Span
			rows[j] = WireRow{Context: r.Context, Target: r.Target, Span: &span}
			if r.Temperature != 0 {
				temp := r.Temperature
				rows[j].Temperature = &temp
			}
			if len(r.ReferenceContext) > 0 {
				rows[j].Reference = r.ReferenceContext
			}
		}
		req.Sets[i] = WireRowSet{ID: s.ID, Statistic: wireStatistic(s.Statistic), Rows: rows}
	}
	return req
}

// SetsFromWire converts resolved wire sets (ResolveSets); a set with
// compact rows stays compact (Tokens and Pieces).
func SetsFromWire(req ScoreRequest) []scorer.RowSet {
	sets := make([]scorer.RowSet, len(req.Sets))
	for i, s := range req.Sets {
		rows := make([]scorer.Row, len(s.Rows))
		var pieces [][]scorer.Piece
		for j, r := range s.Rows {
			rows[j] = scorer.Row{Context: r.Context, Target: r.Target}
			if r.Span != nil {
				rows[j].Span = *r.Span
			}
			if r.Temperature != nil {
				rows[j].Temperature = *r.Temperature
			}
			if r.Reference != nil {
				rows[j].ReferenceContext = r.Reference
			}
			if r.Pieces != nil {
				if pieces == nil {
					pieces = make([][]scorer.Piece, len(s.Rows))
				}
				pieces[j] = r.Pieces
			}
		}
		sets[i] = scorer.RowSet{ID: s.ID, Rows: rows, Statistic: s.Statistic}
		if pieces != nil {
			sets[i].Tokens, sets[i].Pieces = s.Tokens, pieces
		}
	}
	return sets
}

// ValidateTemperatures rejects a row whose temperature is present but not
// > 0 (on the wire 0 is not "absent": leave the field out for 1).
func ValidateTemperatures(req ScoreRequest) error {
	for i, s := range req.Sets {
		for j, r := range s.Rows {
			if t := r.Temperature; t != nil && (!(*t > 0) || math.IsInf(*t, 0)) {
				return scorer.Reject(i, s.ID, "set %d row %d: temperature %v must be a finite number > 0 (leave it out for 1)", i, j, *t)
			}
		}
	}
	return nil
}

// ScoresToWire is the wire form of a score answer's results.
func ScoresToWire(res []scorer.RowScores) []WireRowScores {
	out := make([]WireRowScores, len(res))
	for i, r := range res {
		sc := make([]Score, len(r.Scores))
		for j, v := range r.Scores {
			sc[j] = Score(v)
		}
		out[i] = WireRowScores{Scores: sc, Truncations: r.Truncations}
	}
	return out
}

// ScoresFromWire is one wire result as RowScores (without a policy
// version: that is the answer's).
func ScoresFromWire(w WireRowScores) scorer.RowScores {
	sc := make([]float64, len(w.Scores))
	for j, v := range w.Scores {
		sc[j] = float64(v)
	}
	return scorer.RowScores{Scores: sc, Truncations: w.Truncations}
}

// JobsToWire is the attention request of jobs (an observation range that
// is empty travels as null).
func JobsToWire(jobs []scorer.AttentionJob) AttentionRequest {
	req := AttentionRequest{Jobs: make([]WireJob, len(jobs))}
	for i, j := range jobs {
		steps := make([]WireStep, len(j.Steps))
		for k, s := range j.Steps {
			ws := WireStep{Action: s.Action}
			if s.Observation[1] > s.Observation[0] {
				o := s.Observation
				ws.Observation = &o
			}
			steps[k] = ws
		}
		req.Jobs[i] = WireJob{ID: j.ID, Tokens: j.Tokens, Steps: steps, Layers: j.Layers}
	}
	return req
}

// JobsFromWire is the attention jobs of a request.
func JobsFromWire(req AttentionRequest) []scorer.AttentionJob {
	jobs := make([]scorer.AttentionJob, len(req.Jobs))
	for i, j := range req.Jobs {
		steps := make([]scorer.Step, len(j.Steps))
		for k, s := range j.Steps {
			st := scorer.Step{Action: s.Action}
			if s.Observation != nil {
				st.Observation = *s.Observation
			}
			steps[k] = st
		}
		jobs[i] = scorer.AttentionJob{ID: j.ID, Tokens: j.Tokens, Steps: steps, Layers: j.Layers}
	}
	return jobs
}

// GraphsToWire is the wire result of one job's step graphs.
func GraphsToWire(gs []scorer.StepGraph) WireJobResult {
	out := WireJobResult{Graphs: make([]WireGraph, len(gs))}
	for i, g := range gs {
		out.Graphs[i] = WireGraph{Layer: g.Layer, AA: g.AA, AO: g.AO}
	}
	return out
}

// GraphsFromWire is the step graphs of one job's wire result.
func GraphsFromWire(w WireJobResult) []scorer.StepGraph {
	out := make([]scorer.StepGraph, len(w.Graphs))
	for i, g := range w.Graphs {
		out[i] = scorer.StepGraph{Layer: g.Layer, AA: g.AA, AO: g.AO}
	}
	return out
}
