// Package offline runs the group computation of package credit over JSON
// Lines, without Kafka: `creditflow compute` (docs/offline.md).
//
// Guarantees:
//   - Groups are formed and closed by state.Partition, the core the
//     streaming advantage stage runs, without a window; the numbers are
//     those of credit.ComputeGroup with the registered method
//     (credit.Register), the computation the stream runs, so an offline run
//     over the same scored trajectories gives the same advantages as the
//     stream.
//   - Output order is deterministic: groups in finalization order (a group
//     is finalized when its group_size-th distinct member is read; groups
//     still open at end of input are finalized as partial in the order their
//     first member appeared), members in input order. AttnSR EMA batches are
//     the groups in that order.
//   - A repeated trajectory_id is ignored, a member that arrives after its
//     group was finalized, and a member whose group_size disagrees with its
//     group's, are reported on the diagnostics writer and get no output
//     line. Nothing is dropped silently.
//   - A malformed line stops the run with an error that names the line.
//   - Numbers are written as JSON numbers with full float64 precision
//     (shortest text that reads back to the same float64).
package offline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/state"
)

// Option changes how Compute writes its output.
type Option func(*options)

type options struct {
	tokens    bool
	maxTokens int
	direction string
}

// WithDirection makes Compute refuse an input line whose optional
// "direction" (the scored record's label, e.g. backward:entropy,
// docs/method.md §2.4) is not label: Δ measured with another statistic or
// direction than the caller says. Without it "direction" is not checked.
func WithDirection(label string) Option { return func(o *options) { o.direction = label } }

// DefaultMaxTokens bounds a trajectory's length (prompt and all turns) in
// the input; longer lines are errors, so a typo cannot ask --tokens for
// gigabytes of arrays.
const DefaultMaxTokens = 1 << 20

// WithMaxTokens sets the longest trajectory accepted (DefaultMaxTokens).
func WithMaxTokens(n int) Option { return func(o *options) { o.maxTokens = n } }

// WithTokens also writes the per-token arrays token_advantages, loss_mask
// and (AttnSR ppo) token_rewards (docs/offline.md --tokens).
func WithTokens(on bool) Option { return func(o *options) { o.tokens = on } }

// Input is one input line (docs/offline.md).
type Input struct {
	TrajectoryID string       `json:"trajectory_id"`
	PromptID     string       `json:"prompt_id"`
	GroupSize    *int         `json:"group_size"`
	Reward       *float64     `json:"reward"`
	PredAnswer   *string      `json:"pred_answer"`
	GoldAnswers  []string     `json:"gold_answers"`
	PromptTokens int          `json:"prompt_tokens"`
	Turns        []InputTurn  `json:"turns"`
	Attention    []InputLayer `json:"attention"`
	// Direction is the LAPO label of the Δ values when they were measured
	// with the entropy or kl statistic ("backward:entropy", ...); absent
	// for logprob.
	Direction string `json:"direction,omitempty"`
}

// InputTurn is one turn of an input line.
type InputTurn struct {
	Kind              string   `json:"kind"`
	ActionTokens      int      `json:"action_tokens"`
	ObservationTokens int      `json:"observation_tokens"`
	Delta             *float64 `json:"delta"`
}

// InputLayer is one layer's step graph of an input line.
type InputLayer struct {
	Layer int         `json:"layer"`
	AA    [][]float64 `json:"aa,omitempty"`
	AO    [][]float64 `json:"ao,omitempty"`
	// Sum is G_AA + G_AO (the sum form: AA and AO left out), as records
	// in that form carry it (docs/wire-format.md).
	Sum [][]float64 `json:"sum,omitempty"`
}

// Member converts an input line to a credit.Member.
func (in Input) Member() credit.Member {
	m := credit.Member{
		TrajectoryID: in.TrajectoryID,
		PromptID:     in.PromptID,
		Reward:       in.Reward,
		PredAnswer:   in.PredAnswer,
		GoldAnswers:  in.GoldAnswers,
		PromptTokens: in.PromptTokens,
	}
	if in.GroupSize != nil {
		m.GroupSize = *in.GroupSize
	}
	for _, t := range in.Turns {
		m.Turns = append(m.Turns, credit.Turn{Kind: t.Kind, ActionTokens: t.ActionTokens, ObservationTokens: t.ObservationTokens, Delta: t.Delta})
	}
	for _, l := range in.Attention {
		m.Attention = append(m.Attention, credit.LayerGraph{Layer: l.Layer, AA: l.AA, AO: l.AO, Sum: l.Sum})
	}
	return m
}

type outLAPOTurn struct {
	Eligible         bool     `json:"eligible"`
	Delta            *float64 `json:"delta"`
	Z                *float64 `json:"z"`
	ZNorm            *float64 `json:"z_norm"`
	Gate             int      `json:"gate"`
	ProcessAdvantage float64  `json:"process_advantage"`
	Advantage        float64  `json:"advantage"`
}

type outAttnSRTurn struct {
	P          *float64 `json:"p"`
	StepReward *float64 `json:"step_reward"`
	Weight     *float64 `json:"weight"`
	Advantage  *float64 `json:"advantage"`
}

type outAttnSR struct {
	Confidence float64 `json:"confidence"`
	Focus      float64 `json:"focus"`
	Consensus  float64 `json:"consensus"`
	Baseline   float64 `json:"baseline"`
	Budget     float64 `json:"budget"`
}

type output struct {
	TrajectoryID     string     `json:"trajectory_id"`
	PromptID         string     `json:"prompt_id"`
	Partial          bool       `json:"partial"`
	Reward           float64    `json:"reward"`
	OutcomeAdvantage float64    `json:"outcome_advantage"`
	Turns            any        `json:"turns"`
	AttnSR           *outAttnSR `json:"attnsr,omitempty"`
	TokenAdvantages  *[]float64 `json:"token_advantages,omitempty"`
	LossMask         *[]int     `json:"loss_mask,omitempty"`
	TokenRewards     *[]float64 `json:"token_rewards,omitempty"`
}

// Output builds the docs/offline.md output object of one result.
func Output(m credit.Member, r credit.Result, cfg credit.Config, tokens bool) any {
	o := output{
		TrajectoryID:     r.TrajectoryID,
		PromptID:         r.PromptID,
		Partial:          r.Partial,
		Reward:           r.Reward,
		OutcomeAdvantage: r.OutcomeAdvantage,
	}
	if r.AttnSR == nil { // LAPO's per-turn form, which any method without AttnSR's diagnostics shares
		ts := make([]outLAPOTurn, len(r.Turns))
		for i, t := range r.Turns {
			ts[i] = outLAPOTurn{t.Eligible, t.Delta, t.Z, t.ZNorm, t.Gate, t.ProcessAdvantage, t.Advantage}
		}
		o.Turns = ts
	} else {
		ts := make([]outAttnSRTurn, len(r.Turns))
		for i, t := range r.Turns {
			ts[i] = outAttnSRTurn{P: t.P, StepReward: t.StepReward, Weight: t.Weight}
			if cfg.Output == credit.OutputGRPO {
				a := t.Advantage
				ts[i].Advantage = &a
			}
		}
		o.Turns = ts
		a := r.AttnSR
		o.AttnSR = &outAttnSR{a.Confidence, a.Focus, a.Consensus, a.Baseline, a.Budget}
	}
	if tokens {
		adv, mask, tr := credit.TokenArrays(m, r, cfg)
		im := make([]int, len(mask))
		for i, v := range mask {
			im[i] = int(v)
		}
		o.TokenAdvantages = &adv
		o.LossMask = &im
		if tr != nil {
			o.TokenRewards = &tr
		}
	}
	return o
}

// Compute reads scored trajectories as JSON Lines from r, groups them by
// prompt_id on the partition core the streaming advantage stage runs
// (state.Partition, without a window: a group closes when its
// group_size-th member arrives, or at the end of input), finalizes each
// group with credit.ComputeGroup and writes one output line per distinct
// trajectory to w (docs/offline.md). Late, repeated and
// group-size-mismatched members are reported on diag. Blank lines are
// skipped. The first malformed line ends the run with an error naming it;
// the groups finalized before it have been written.
func Compute(r io.Reader, w io.Writer, diag io.Writer, cfg credit.Config, opts ...Option) error {
	o := options{maxTokens: DefaultMaxTokens}
	for _, f := range opts {
		f(&o)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if diag == nil {
		diag = io.Discard
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)

	core := state.NewBatch(func(g *state.Group[credit.Member], partial bool, ema *credit.EMA) ([]credit.Result, float64, error) {
		members := make([]credit.Member, len(g.Members))
		for i, m := range g.Members {
			members[i] = m.Value
		}
		res, err := credit.ComputeGroup(members, partial, cfg, ema)
		return res, 0, err // the batch mean is for snapshots, which a batch does not keep
	})
	// act writes a decision's outputs: the results of a finalized group,
	// members in input order, or a member's diagnostic.
	act := func(d state.Decision[credit.Member, []credit.Result], lineNo int) error {
		switch d.Action {
		case state.Finalize:
			for i, r := range d.Result {
				if err := enc.Encode(Output(d.Group.Members[i].Value, r, cfg, o.tokens)); err != nil {
					return fmt.Errorf("writing output of trajectory %q: %w", r.TrajectoryID, err)
				}
			}
		case state.Refused:
			return fmt.Errorf("prompt %q: %w", d.Group.PromptID, d.Err)
		case state.LateMember:
			fmt.Fprintf(diag, "line %d: trajectory %q is late: group %q was already finalized; no output\n", lineNo, d.Member.TrajectoryID, d.Member.Value.PromptID)
		case state.SizeMismatchMember:
			m := d.Member.Value
			fmt.Fprintf(diag, "line %d: trajectory %q says group_size %d but group %q has %d; ignored\n", lineNo, m.TrajectoryID, m.GroupSize, m.PromptID, d.Group.GroupSize)
		}
		return nil
	}
	// Trajectory ids are unique across the input: a repeated one is
	// ignored whatever its group, and so is one repeating a late member.
	seen := map[string]bool{}

	// A malformed line ends the input there: the lines before it are all
	// answered (groups still open are finalized as partial, as at the end of
	// input), then the error is returned.
	br := bufio.NewReaderSize(r, 1<<20)
	readErr := func() error {
		for lineNo := 1; ; lineNo++ {
			line, rerr := br.ReadBytes('\n')
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return fmt.Errorf("reading line %d: %w", lineNo, rerr)
			}
			if t := bytes.TrimSpace(line); len(t) > 0 {
				m, err := readLine(t, cfg, o)
				if err != nil {
					return fmt.Errorf("line %d: %w", lineNo, err)
				}
				if seen[m.TrajectoryID] {
					fmt.Fprintf(diag, "line %d: trajectory %q repeated; ignored\n", lineNo, m.TrajectoryID)
				} else {
					for _, d := range core.Handle(m.PromptID, m.GroupSize, state.Member[credit.Member]{TrajectoryID: m.TrajectoryID, Offset: int64(lineNo), Value: m}) {
						if d.Action != state.SizeMismatchMember {
							seen[m.TrajectoryID] = true
						}
						if err := act(d, lineNo); err != nil {
							return fmt.Errorf("line %d: %w", lineNo, err)
						}
					}
				}
			}
			if rerr != nil { // io.EOF
				return nil
			}
		}
	}()
	for _, d := range core.End() {
		if err := act(d, 0); err != nil {
			bw.Flush()
			return errors.Join(readErr, fmt.Errorf("end of input: %w", err))
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return readErr
}

// readLine reads one non-blank input line into a validated member.
func readLine(t []byte, cfg credit.Config, o options) (credit.Member, error) {
	if err := checkLineJSON(t); err != nil {
		return credit.Member{}, err
	}
	var in Input
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields() // a misspelled field is an error, not a silent default
	if err := dec.Decode(&in); err != nil {
		return credit.Member{}, fmt.Errorf("not a scored trajectory object: %v (the fields are listed in docs/offline.md)", err)
	}
	if in.GroupSize == nil || *in.GroupSize < 1 {
		return credit.Member{}, errors.New("group_size is missing or < 1; every trajectory must say how many members its group has")
	}
	if d := in.Direction; o.direction != "" && d != "" && d != o.direction {
		return credit.Member{}, fmt.Errorf("trajectory %q has direction %q, but this run computes %q: set --direction and --lapo-statistic to how the input was scored", in.TrajectoryID, d, o.direction)
	}
	m := in.Member()
	if err := credit.ValidateMember(m, cfg); err != nil {
		return credit.Member{}, err
	}
	if !withinTokens(m, o.maxTokens) {
		return credit.Member{}, fmt.Errorf("trajectory %q has more than %d tokens (raise the limit with --max-tokens)", m.TrajectoryID, o.maxTokens)
	}
	return m, nil
}

// withinTokens reports whether m has at most limit tokens, without
// overflowing on absurd counts.
func withinTokens(m credit.Member, limit int) bool {
	n := m.PromptTokens
	if n > limit {
		return false
	}
	for _, t := range m.Turns {
		if t.ActionTokens > limit || t.ObservationTokens > limit {
			return false
		}
		if n += t.ActionTokens + t.ObservationTokens; n > limit {
			return false
		}
	}
	return true
}

// checkLineJSON reports, in words, an input line that is not one JSON
// object: not JSON at all, a JSON value of another kind, or more than one
// value.
func checkLineJSON(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		snippet := string(line)
		if len(snippet) > 40 {
			snippet = snippet[:40] + "…"
		}
		return fmt.Errorf("not JSON: %q; write one scored trajectory object per line (docs/offline.md)", snippet)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value on the line; write one scored trajectory object per line")
	}
	kind := "number"
	switch raw[0] {
	case '{':
		return nil
	case '[':
		kind = "array"
	case '"':
		kind = "string"
	case 'n':
		kind = "null"
	case 't', 'f':
		kind = "boolean"
	}
	return fmt.Errorf("a JSON %s, not an object; write one scored trajectory object per line (docs/offline.md)", kind)
}
