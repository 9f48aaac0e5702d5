package offline

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/processors/credit"
)

func run(t *testing.T, in string, cfg credit.Config, opts ...Option) ([]map[string]any, string) {
	t.Helper()
	var out, diag bytes.Buffer
	if err := Compute(strings.NewReader(in), &out, &diag, cfg, opts...); err != nil {
		t.Fatalf("Compute: %v", err)
	}
	var recs []map[string]any
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	return recs, diag.String()
}

func TestGroupingAndOrder(t *testing.T) {
	in := `{"trajectory_id":"x1","prompt_id":"x","group_size":3,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"a1","prompt_id":"a","group_size":2,"reward":0,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"y1","prompt_id":"y","group_size":2,"reward":0,"turns":[{"kind":"answer","action_tokens":1}]}

{"trajectory_id":"a1","prompt_id":"a","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"a2","prompt_id":"a","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"a3","prompt_id":"a","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"x2","prompt_id":"x","group_size":4,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"x3","prompt_id":"x","group_size":3,"reward":0,"turns":[{"kind":"answer","action_tokens":1}]}
`
	recs, diag := run(t, in, credit.DefaultConfig())
	var ids []string
	for _, r := range recs {
		ids = append(ids, r["trajectory_id"].(string))
	}
	// a finalizes at a2; at end of input x (first seen) then y, as partial.
	if got := strings.Join(ids, ","); got != "a1,a2,x1,x3,y1" {
		t.Fatalf("order %s", got)
	}
	if recs[0]["partial"] != false || recs[2]["partial"] != true || recs[4]["partial"] != true {
		t.Errorf("partial flags wrong: %v", recs)
	}
	// The repeated a1 (reward 1) was ignored: a's rewards are [0, 1].
	if recs[0]["reward"].(float64) != 0 || !(recs[0]["outcome_advantage"].(float64) < 0) {
		t.Errorf("repeat not ignored: %v", recs[0])
	}
	for _, want := range []string{`line 5: trajectory "a1" repeated`, `line 7: trajectory "a3" is late`, `line 8: trajectory "x2" says group_size 4`} {
		if !strings.Contains(diag, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, diag)
		}
	}
	if _, ok := recs[0]["attnsr"]; ok {
		t.Error("lapo output carries an attnsr object")
	}
	if _, ok := recs[0]["token_advantages"]; ok {
		t.Error("token arrays written without WithTokens")
	}
}

func TestMalformedLines(t *testing.T) {
	good := `{"trajectory_id":"g","prompt_id":"p","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}`
	cases := map[string]string{
		"not json":      `{"trajectory_id":`,
		"no group size": `{"trajectory_id":"t","prompt_id":"p","reward":1,"turns":[{"kind":"answer"}]}`,
		"no turns":      `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1}`,
		"bad kind":      `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1,"turns":[{"kind":"jump"}]}`,
		"no reward":     `{"trajectory_id":"t","prompt_id":"p","group_size":1,"turns":[{"kind":"answer"}]}`,
		"negative":      `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1,"turns":[{"kind":"answer","action_tokens":-1}]}`,
		"array":         `[1,2]`,
		"trailing":      good + ` {}`,
		"misspelled":    `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1,"pred_answr":"x","turns":[{"kind":"answer"}]}`,
		"turn field":    `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1,"turns":[{"kind":"answer","detla":0.5}]}`,
	}
	for name, bad := range cases {
		var out, diag bytes.Buffer
		err := Compute(strings.NewReader(good+"\n"+bad+"\n"), &out, &diag, credit.DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: err = %v, want one naming line 2", name, err)
		}
		if strings.HasPrefix(name, "misspelled") || name == "turn field" {
			if field := map[string]string{"misspelled": "pred_answr", "turn field": "detla"}[name]; !strings.Contains(err.Error(), field) {
				t.Errorf("%s: err = %v, want it to name the field %q", name, err, field)
			}
		}
	}
	// A line that is not JSON, or JSON but not an object, says so in words
	// (not the JSON decoder's "invalid character 'o' in literal null").
	for bad, want := range map[string]string{
		`not json`:          "line 2: not JSON",
		`{"trajectory_id":`: "line 2: not JSON",
		`[1,2]`:             "line 2: a JSON array, not an object",
		`"text"`:            "line 2: a JSON string, not an object",
		`null`:              "line 2: a JSON null, not an object",
		`12`:                "line 2: a JSON number, not an object",
	} {
		err := Compute(strings.NewReader(good+"\n"+bad+"\n"), &bytes.Buffer{}, &bytes.Buffer{}, credit.DefaultConfig())
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "invalid character") {
			t.Errorf("%s: err = %v, want one starting %q", bad, err, want)
		}
	}
	// AttnSR needs graphs for K ≥ 2.
	cfg := credit.DefaultConfig()
	cfg.Method = credit.MethodAttnSR
	in := `{"trajectory_id":"t","prompt_id":"p","group_size":1,"reward":1,"turns":[{"kind":"tool","action_tokens":1},{"kind":"answer","action_tokens":1}]}`
	if err := Compute(strings.NewReader(in), &bytes.Buffer{}, nil, cfg); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("attnsr without attention: %v", err)
	}
	bad := credit.DefaultConfig()
	bad.Lambda = 1 / func() float64 { return 0 }()
	if err := Compute(strings.NewReader(good), &bytes.Buffer{}, nil, bad); err == nil {
		t.Error("invalid config accepted")
	}
}

func TestTokens(t *testing.T) {
	in := `{"trajectory_id":"t","prompt_id":"p","group_size":2,"reward":1,"prompt_tokens":3,"turns":[{"kind":"search","action_tokens":2,"observation_tokens":4,"delta":0.5},{"kind":"answer","action_tokens":3}]}
{"trajectory_id":"u","prompt_id":"p","group_size":2,"reward":0,"prompt_tokens":1,"turns":[{"kind":"search","action_tokens":1,"observation_tokens":1,"delta":-0.5},{"kind":"answer","action_tokens":1}]}
`
	recs, _ := run(t, in, credit.DefaultConfig(), WithTokens(true))
	r := recs[0]
	adv := r["token_advantages"].([]any)
	mask := r["loss_mask"].([]any)
	if len(adv) != 12 || len(mask) != 12 {
		t.Fatalf("lengths %d %d, want 3 + 2 + 4 + 3 = 12", len(adv), len(mask))
	}
	turns := r["turns"].([]any)
	a0 := turns[0].(map[string]any)["advantage"].(float64)
	a1 := turns[1].(map[string]any)["advantage"].(float64)
	want := []float64{0, 0, 0, a0, a0, 0, 0, 0, 0, a1, a1, a1}
	for i := range want {
		m := 0.0
		if want[i] != 0 {
			m = 1
		}
		if adv[i].(float64) != want[i] || mask[i].(float64) != m {
			t.Fatalf("token %d: adv %v mask %v, want %v %v", i, adv[i], mask[i], want[i], m)
		}
	}
	if _, ok := r["token_rewards"]; ok {
		t.Error("token_rewards outside attnsr ppo")
	}
	// AttnSR ppo: token_advantages null, token_rewards present.
	cfg := credit.DefaultConfig()
	cfg.Method, cfg.Output = credit.MethodAttnSR, credit.OutputPPO
	att := `,"attention":[{"layer":8,"aa":[[0,0],[0.3,0]],"ao":[[0,0],[0.2,0]]}]}`
	in = strings.Replace(in, "}]}\n", "}]"+att+"\n", 2)
	recs, _ = run(t, in, cfg, WithTokens(true))
	if v, ok := recs[0]["token_advantages"]; !ok || v != nil {
		t.Errorf("ppo token_advantages = %v (present %v), want null", v, ok)
	}
	tr := recs[0]["token_rewards"].([]any)
	if len(tr) != 12 || tr[11].(float64) != 1 {
		t.Errorf("ppo token rewards %v", tr)
	}
	turns = recs[0]["turns"].([]any)
	if tt := turns[0].(map[string]any); tt["weight"] != nil || tt["advantage"] != nil {
		t.Errorf("ppo turn %v, want null weight and advantage", tt)
	}
}

// TestMalformedLineAnswersEarlierLines: a malformed line stops the run with
// an error, after every line before it was answered — a group finalized
// earlier, and a group still open, finalized as partial as at the end of
// input.
func TestMalformedLineAnswersEarlierLines(t *testing.T) {
	in := `{"trajectory_id":"a1","prompt_id":"a","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"a2","prompt_id":"a","group_size":2,"reward":0,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":"b1","prompt_id":"b","group_size":2,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
{"trajectory_id":
{"trajectory_id":"c1","prompt_id":"c","group_size":1,"reward":1,"turns":[{"kind":"answer","action_tokens":1}]}
`
	var out bytes.Buffer
	err := Compute(strings.NewReader(in), &out, nil, credit.DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err = %v, want one naming line 4", err)
	}
	var ids []string
	dec := json.NewDecoder(&out)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m["trajectory_id"].(string))
		if m["trajectory_id"] == "b1" && m["partial"] != true {
			t.Errorf("b1's open group finalized as %v, want partial", m["partial"])
		}
	}
	if got := strings.Join(ids, ","); got != "a1,a2,b1" {
		t.Fatalf("answered %q before the malformed line, want a1,a2,b1", got)
	}
}
