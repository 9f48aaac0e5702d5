package cpumodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/creditflow/creditflow/scorer"
)

// maxLineBytes bounds one JSON Lines input line (a 32k-token trajectory is
// well under 1 MB).
const maxLineBytes = 64 << 20

// maxBatchLines bounds how many score lines are scored together (sharing
// prefixes across lines).
const maxBatchLines = 256

type scoreLine struct {
	Context          []int32  `json:"context"`
	Target           []int32  `json:"target"`
	Span             []int    `json:"span"`
	Temperature      *float64 `json:"temperature"`       // absent or null: 1
	ReferenceContext []int32  `json:"reference_context"` // the kl statistic only
}

type lineReader struct {
	br   *bufio.Reader
	line int
}

// next returns the next non-blank line, or io.EOF.
func (lr *lineReader) next() ([]byte, error) {
	for {
		b, err := lr.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			full := append([]byte(nil), b...)
			for err == bufio.ErrBufferFull {
				b, err = lr.br.ReadSlice('\n')
				full = append(full, b...)
				if len(full) > maxLineBytes {
					return nil, fmt.Errorf("line %d: longer than %d bytes", lr.line+1, maxLineBytes)
				}
			}
			b = full
		}
		if len(b) == 0 && err != nil {
			return nil, err
		}
		lr.line++
		if err != nil && err != io.EOF {
			return nil, err
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			return t, nil
		}
		if err == io.EOF {
			return nil, io.EOF
		}
	}
}

// RunScoreJSONL is `creditflow score` (docs/offline.md): each input line
// {"context":[ids],"target":[ids],"span":[a,b],"temperature":T} ("temperature"
// optional, default 1) gives one output line {"score":S} in input order (S is
// null when not finite). Lines that are
// available together are scored as one batch, so rows sharing a prefix
// (consecutive rows of one trajectory) compute it once. Blank lines are
// skipped. The first bad line stops the run with an error naming its line
// number; every line before it has been answered.
func RunScoreJSONL(m *Model, r io.Reader, w io.Writer) error {
	return RunScoreJSONLStatistic(m, r, w, scorer.StatLogProb)
}

// RunScoreJSONLStatistic is RunScoreJSONL answering each row with the
// statistic stat (ScoreRowsStatistic): StatLogProb is RunScoreJSONL;
// StatKL rows carry "reference_context":[ids] as well, which the other
// statistics refuse.
func RunScoreJSONLStatistic(m *Model, r io.Reader, w io.Writer, stat string) error {
	if err := CheckStatistic(stat); err != nil {
		return err
	}
	lr := &lineReader{br: bufio.NewReaderSize(r, 1<<20)}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	var rows []scorer.Row
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		scores, _, err := m.ScoreRowsStatistic(rows, stat)
		if err != nil {
			return err // rows were validated one by one; not expected
		}
		for _, s := range scores {
			if math.IsNaN(s) || math.IsInf(s, 0) {
				bw.WriteString(`{"score":null}` + "\n")
				continue
			}
			b, _ := json.Marshal(map[string]float64{"score": s})
			bw.Write(append(b, '\n'))
		}
		rows = rows[:0]
		return bw.Flush()
	}
	for {
		b, err := lr.next()
		if err == io.EOF {
			return flush()
		}
		if err != nil {
			flush()
			return err
		}
		var in scoreLine
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			flush()
			return fmt.Errorf("line %d: %v (want {\"context\":[ids],\"target\":[ids],\"span\":[a,b]})", lr.line, err)
		}
		if len(in.Span) != 2 {
			flush()
			return fmt.Errorf("line %d: \"span\" must be [a,b], a half-open range into target", lr.line)
		}
		row := scorer.Row{Context: in.Context, Target: in.Target, Span: [2]int{in.Span[0], in.Span[1]}, ReferenceContext: in.ReferenceContext}
		switch {
		case stat == scorer.StatKL && in.ReferenceContext == nil:
			flush()
			return fmt.Errorf("line %d: the kl statistic needs \"reference_context\":[ids], the context the distributions are compared with", lr.line)
		case stat != scorer.StatKL && in.ReferenceContext != nil:
			flush()
			return fmt.Errorf("line %d: \"reference_context\" is read only with the kl statistic", lr.line)
		}
		if in.Temperature != nil {
			if !(*in.Temperature > 0) {
				flush()
				return fmt.Errorf("line %d: \"temperature\" %v must be > 0 (leave it out for 1)", lr.line, *in.Temperature)
			}
			row.Temperature = *in.Temperature
		}
		if _, _, err := m.prepareRows([]scorer.Row{row}); err != nil {
			flush()
			return fmt.Errorf("line %d: %v", lr.line, trimRowPrefix(err))
		}
		if row.ReferenceContext != nil {
			alt := row
			alt.Context = row.ReferenceContext
			if _, _, err := m.prepareRows([]scorer.Row{alt}); err != nil {
				flush()
				return fmt.Errorf("line %d: reference_context: %v", lr.line, trimRowPrefix(err))
			}
		}
		rows = append(rows, row)
		if len(rows) >= maxBatchLines || lr.br.Buffered() == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

func trimRowPrefix(err error) string {
	s := err.Error()
	if len(s) > 7 && s[:7] == "row 0: " {
		return s[7:]
	}
	return s
}

type attnLine struct {
	Tokens []int32 `json:"tokens"`
	Steps  []struct {
		Action      []int `json:"action"`
		Observation []int `json:"observation"`
	} `json:"steps"`
	Layers []int `json:"layers"`
}

type attnOutLayer struct {
	Layer int         `json:"layer"`
	AA    [][]float64 `json:"aa"`
	AO    [][]float64 `json:"ao"`
}

// RunAttentionJSONL is `creditflow attention` (docs/offline.md): each input line
// {"tokens":[ids],"steps":[{"action":[s,e],"observation":[s,e]|null}],"layers":[l…]}
// gives {"layers":[{"layer":l,"aa":K×K,"ao":K×K}]}. Without "layers" (or with
// an empty list) the docs/method.md §3.1 default layers of the model are used, each
// once. The first bad line stops the run with an error naming its line
// number; every line before it has been answered.
func RunAttentionJSONL(m *Model, r io.Reader, w io.Writer) error {
	lr := &lineReader{br: bufio.NewReaderSize(r, 1<<20)}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	for {
		b, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var in attnLine
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return fmt.Errorf("line %d: %v (want {\"tokens\":[ids],\"steps\":[{\"action\":[s,e],\"observation\":[s,e] or null}],\"layers\":[l...]})", lr.line, err)
		}
		steps := make([]scorer.Step, len(in.Steps))
		for i, s := range in.Steps {
			if len(s.Action) != 2 {
				return fmt.Errorf("line %d: step %d: \"action\" must be [s,e]", lr.line, i)
			}
			steps[i].Action = [2]int{s.Action[0], s.Action[1]}
			if s.Observation != nil {
				if len(s.Observation) != 2 {
					return fmt.Errorf("line %d: step %d: \"observation\" must be [s,e] or null", lr.line, i)
				}
				steps[i].Observation = [2]int{s.Observation[0], s.Observation[1]}
			} else {
				steps[i].Observation = [2]int{s.Action[1], s.Action[1]}
			}
		}
		layers := in.Layers
		if len(layers) == 0 {
			layers = uniqueInts(DefaultLayers(m.cfg.Layers))
		}
		graphs, err := m.StepGraphs(in.Tokens, steps, layers)
		if err != nil {
			return fmt.Errorf("line %d: %v", lr.line, err)
		}
		out := struct {
			Layers []attnOutLayer `json:"layers"`
		}{}
		for _, g := range graphs {
			out.Layers = append(out.Layers, attnOutLayer{Layer: g.Layer, AA: g.AA, AO: g.AO})
		}
		ob, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("line %d: encoding the result: %v", lr.line, err)
		}
		bw.Write(append(ob, '\n'))
		if err := bw.Flush(); err != nil {
			return err
		}
	}
}

func uniqueInts(a []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, v := range a {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
