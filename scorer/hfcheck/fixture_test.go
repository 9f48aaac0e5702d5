package hfcheck_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
)

// checkpoints are the published configs the models are built from
// (testdata/configs); form "v4" writes the published 4.x-era config.json
// fields into the saved folder, "v5" keeps what transformers 5 writes. A
// variant (transformers_ref.py's apply_variant) changes the saved folder
// into a checkpoint transformers loads in a particular way, and the model is
// named base+variant: a tied config whose file also holds a different
// lm_head.weight (transformers unties them), a tied file holding only
// lm_head.weight (transformers ties the embeddings to it), and a Qwen3
// config saying mlp_bias (a field Qwen3's MLP ignores).
var checkpoints = []struct {
	base    string
	variant string
	seed    int
	form    string
}{
	{"Qwen2.5-0.5B-Instruct", "", 11, "v5"},
	{"Qwen2.5-7B-Instruct", "", 12, "v4"},
	{"Qwen3-0.6B", "", 13, "v4"},
	{"Qwen3-8B", "", 14, "v5"},
	{"Llama-3.2-1B", "", 15, "v5"},
	{"Llama-3.1-8B", "", 16, "v4"},
	{"Qwen2.5-0.5B-Instruct", "lm-head-differs", 17, "v5"},
	{"Llama-3.2-1B", "lm-head-only", 18, "v4"},
	{"Qwen3-0.6B", "mlp-bias-field", 19, "v5"},
}

// checkpointName is the name of a checkpoints entry's model (its folder).
func checkpointName(base, variant string) string {
	if variant == "" {
		return base
	}
	return base + "+" + variant
}

// maxContext is the context cap both scorers run with (model.WithMaxContext,
// the pod's --max-context), so that the long trajectory's rows are cut from
// the left as past a model's window, at a length the CPU scores quickly.
const maxContext = 160

// rowCase is one row set as the score stage sends it, and its rows with
// their contexts materialized (what transformers is given).
type rowCase struct {
	name string
	set  scorer.RowSet
	rows []scorer.Row
	stat string
}

// refResult is transformers_ref.py's answer for one job.
type refResult struct {
	Scores []float64 `json:"scores"`
	Graphs [][]struct {
		Layer int         `json:"layer"`
		AA    [][]float64 `json:"aa"`
		AO    [][]float64 `json:"ao"`
	} `json:"graphs"`
}

// checkpointFix is one built model with its work and transformers' answers.
type checkpointFix struct {
	Name     string         `json:"name"`
	Dir      string         `json:"dir"`
	DirBF16  string         `json:"dir_bf16"`
	Config   map[string]any `json:"config"`
	Entropy  float64        `json:"entropy"`
	LogVocab float64        `json:"log_vocab"`

	vocab, layers int
	placeholder   int32
	cases         []rowCase
	jobs          []scorer.AttentionJob
	// ref holds transformers' answers: "float32" (the float32 folder),
	// "bf16-weights" (the bfloat16 folder computed in float32) and
	// "bfloat16" (transformers in bfloat16; logprob rows and graphs only).
	ref map[string]refResult
}

// rowsOf returns every case's rows in order, with the statistic of their
// set (what the reference job and `creditflow score` take), optionally only
// the logprob sets.
func (c *checkpointFix) rowsOf(logprobOnly bool) (rows []map[string]any) {
	for _, rc := range c.cases {
		if logprobOnly && rc.stat != string(credit.StatLogProb) {
			continue
		}
		for _, r := range rc.rows {
			m := map[string]any{"context": r.Context, "target": r.Target, "span": r.Span[:],
				"temperature": r.Temperature, "statistic": rc.stat}
			if r.ReferenceContext != nil {
				m["reference_context"] = r.ReferenceContext
			}
			rows = append(rows, m)
		}
	}
	return rows
}

type fixture struct {
	python  string
	root    string
	models  []*checkpointFix
	tfVer   string
	torchV  string
	elapsed time.Duration
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
	fixRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{fixRoot, binDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// getFixture builds the models and computes transformers' answers once per
// test run (two runs of the generator: build, then reference).
func getFixture(t *testing.T) *fixture {
	t.Helper()
	py := pyenvtest.Python(t)
	fixOnce.Do(func() { fix, fixErr = buildFixture(py) })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

func (f *fixture) model(t *testing.T, name string) *checkpointFix {
	t.Helper()
	for _, m := range f.models {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no model %s", name)
	return nil
}

// runGenerator runs testdata/transformers_ref.py with the given command and
// JSON input, decoding its result into out.
func runGenerator(py, cmd string, in any, out any) (tf, torch string, err error) {
	b, err := json.Marshal(in)
	if err != nil {
		return "", "", err
	}
	c := exec.Command(py, "testdata/transformers_ref.py", cmd)
	c.Stdin = bytes.NewReader(b)
	c.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HUB_DISABLE_PROGRESS_BARS=1", "TRANSFORMERS_VERBOSITY=error")
	var so, se bytes.Buffer
	c.Stdout, c.Stderr = &so, &se
	if err := c.Run(); err != nil {
		return "", "", fmt.Errorf("transformers_ref.py %s: %v\n%s", cmd, err, se.String())
	}
	var res struct {
		Transformers string          `json:"transformers"`
		Torch        string          `json:"torch"`
		Result       json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(so.Bytes(), &res); err != nil {
		return "", "", fmt.Errorf("transformers_ref.py %s output: %v", cmd, err)
	}
	return res.Transformers, res.Torch, json.Unmarshal(res.Result, out)
}

func buildFixture(py string) (*fixture, error) {
	start := time.Now()
	root, err := os.MkdirTemp("", "creditflow-hfcheck-")
	if err != nil {
		return nil, err
	}
	fixRoot = root
	f := &fixture{python: py, root: root}
	var specs []map[string]any
	for _, c := range checkpoints {
		spec := map[string]any{"name": c.base, "seed": c.seed, "form": c.form}
		if c.variant != "" {
			spec["variant"] = c.variant
		}
		specs = append(specs, spec)
	}
	if _, _, err := runGenerator(py, "build", map[string]any{"out": root, "models": specs}, &f.models); err != nil {
		return nil, err
	}
	var jobs []map[string]any
	for i, m := range f.models {
		m.vocab = int(m.Config["vocab_size"].(float64))
		m.layers = int(m.Config["num_hidden_layers"].(float64))
		m.placeholder = int32(m.vocab - 1)
		if err := m.makeWork(uint64(100 + i)); err != nil {
			return nil, err
		}
		var att []map[string]any
		for _, j := range m.jobs {
			steps := make([]map[string]any, len(j.Steps))
			for k, s := range j.Steps {
				steps[k] = map[string]any{"action": s.Action[:], "observation": nil}
				if s.Observation[1] > s.Observation[0] {
					steps[k]["observation"] = s.Observation[:]
				}
			}
			att = append(att, map[string]any{"tokens": j.Tokens, "steps": steps, "layers": j.Layers})
		}
		jobs = append(jobs,
			map[string]any{"dir": m.Dir, "dtype": "float32", "max_context": maxContext, "rows": m.rowsOf(false), "attention": att},
			map[string]any{"dir": m.DirBF16, "dtype": "float32", "max_context": maxContext, "rows": m.rowsOf(true), "attention": att},
			map[string]any{"dir": m.DirBF16, "dtype": "bfloat16", "max_context": maxContext, "rows": m.rowsOf(true), "attention": att})
	}
	var res []refResult
	if f.tfVer, f.torchV, err = runGenerator(py, "reference", jobs, &res); err != nil {
		return nil, err
	}
	if len(res) != 3*len(f.models) {
		return nil, fmt.Errorf("transformers_ref.py answered %d jobs of %d", len(res), 3*len(f.models))
	}
	for i, m := range f.models {
		m.ref = map[string]refResult{"float32": res[3*i], "bf16-weights": res[3*i+1], "bfloat16": res[3*i+2]}
	}
	f.elapsed = time.Since(start)
	return f, nil
}

// makeWork builds two multi-turn search trajectories over the model's
// vocabulary and the row sets the score stage sends for them: backward and
// forward, logprob, entropy and kl, at temperatures 0.7 and 1.3. The second
// trajectory is longer than maxContext, so its rows' contexts are cut from
// the left. The first trajectory's step graphs are asked on every layer.
func (c *checkpointFix) makeWork(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 7))
	toks := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r.IntN(c.vocab - 1)) // the last id is the placeholder
		}
		return out
	}
	traj := func(id string, prompt, obs int, temp float32) *schemas.Trajectory {
		t := &schemas.Trajectory{TrajectoryID: id, Prompt: toks(prompt), Temperature: &temp,
			GoldAnswers: []string{"answer"}, GoldTarget: toks(10), GoldSpan: [2]int32{2, 8}}
		for k := 0; k < 3; k++ {
			t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindSearch, Action: toks(6 + r.IntN(5)), Observation: toks(obs + r.IntN(6))})
		}
		t.Turns = append(t.Turns, schemas.Turn{Kind: schemas.KindAnswer, Action: toks(6)})
		return t
	}
	cc := credit.DefaultConfig()
	short := traj("short", 20, 12, 0.7) // about 100 tokens: fits maxContext
	long := traj("long", 60, 30, 1.3)   // about 200 tokens: cut
	plans := []struct {
		t    *schemas.Trajectory
		dir  vocab.Direction
		stat vocab.Statistic
	}{
		{short, scoring.Backward, credit.StatLogProb}, {short, scoring.Forward, credit.StatLogProb},
		{short, scoring.Backward, credit.StatEntropy}, {short, scoring.Backward, credit.StatKL},
		{long, scoring.Backward, credit.StatLogProb}, {long, scoring.Forward, credit.StatLogProb},
		{long, scoring.Forward, credit.StatEntropy}, {long, scoring.Forward, credit.StatKL},
	}
	for _, p := range plans {
		plan, err := scoring.PlanLAPOStatistic(p.t, p.dir, p.stat, cc, []int32{c.placeholder})
		if err != nil {
			return err
		}
		name := p.t.TrajectoryID + "/" + string(p.dir) + "/" + string(p.stat)
		set := plan.RowSet(name)
		full, err := scorer.ExpandSet(set)
		if err != nil {
			return err
		}
		c.cases = append(c.cases, rowCase{name: name, set: set, rows: full.Rows, stat: string(p.stat)})
	}
	layers := make([]int, c.layers)
	for i := range layers {
		layers[i] = i
	}
	c.jobs = []scorer.AttentionJob{scoring.AttentionJob(short, layers)}
	if n := len(c.jobs[0].Tokens); n > maxContext {
		return fmt.Errorf("%s: the short trajectory has %d tokens, more than %d", c.Name, n, maxContext)
	}
	if r := c.cases[4].rows[0]; len(r.Context)+len(r.Target) <= maxContext {
		return fmt.Errorf("%s: the long trajectory's full row has %d tokens, not more than %d", c.Name, len(r.Context)+len(r.Target), maxContext)
	}
	return nil
}

// modelDir is the float32 or bfloat16 folder.
func (c *checkpointFix) modelDir(bf16 bool) string {
	if bf16 {
		return c.DirBF16
	}
	return c.Dir
}
