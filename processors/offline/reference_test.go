package offline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/credit"
)

// genInput writes a random JSON Lines input: interleaved groups of random
// size (some left incomplete, so they end partial), repeated and late
// members, answer and no-answer trajectories, turns with and without delta,
// rewards given or derived from pred/gold answers, and (attnsr) random
// lower-triangular step graphs whose rows sum to at most 1.
func genInput(rng *rand.Rand, attnsr bool, groups int) []byte {
	words := []string{"the", "a", "an", "Paris", "paris,", "New", "york", "York!", "city", "1,000", "x", "café",
		"“the", "the—end", "théa", "«An»", "a_b", "the\u00a0a", "l'the", "the\u0301", "\x1cthe", "ⅰthe", "ΟΔΟΣ", "οδος", "ΑΣ:", "İz", "i̇z"}
	phrase := func() string {
		n := rng.Intn(4)
		ws := make([]string, n)
		for i := range ws {
			ws[i] = words[rng.Intn(len(words))]
		}
		return strings.Join(ws, " ")
	}
	kinds := []string{"search", "search", "search", "tool", "other"}
	graph := func(k int) [][]float64 {
		g := make([][]float64, k)
		for j := range g {
			g[j] = make([]float64, k)
			s := 0.0
			for c := 0; c < j; c++ {
				if rng.Intn(6) > 0 {
					g[j][c] = rng.Float64()
					s += g[j][c]
				}
			}
			if s > 0 {
				f := 0.5 * rng.Float64() / s
				for c := 0; c < j; c++ {
					g[j][c] *= f
				}
			}
			for c := j; c < k; c++ { // entries k ≥ j are ignored by definition
				if rng.Intn(4) == 0 {
					g[j][c] = rng.Float64()
				}
			}
		}
		return g
	}
	var lines [][]byte
	var lateLines [][]byte
	for g := 0; g < groups; g++ {
		size := 1 + rng.Intn(5)
		present := size
		if rng.Intn(4) == 0 {
			present = 1 + rng.Intn(size) // may stay incomplete → partial
		}
		pid := fmt.Sprintf("p%d", g)
		for i := 0; i < present; i++ {
			rec := map[string]any{
				"trajectory_id": fmt.Sprintf("%s-t%d", pid, i),
				"prompt_id":     pid,
				"group_size":    size,
				"prompt_tokens": rng.Intn(5),
			}
			switch rng.Intn(3) {
			case 0:
				rec["reward"] = rng.Float64()
			case 1:
				rec["reward"] = float64(rng.Intn(2))
			default:
				if rng.Intn(5) > 0 {
					rec["pred_answer"] = phrase()
				}
				golds := []string{phrase()}
				if rng.Intn(2) == 0 {
					golds = append(golds, phrase())
				}
				rec["gold_answers"] = golds
			}
			k := 1 + rng.Intn(6)
			answer := rng.Intn(4) > 0
			var turns []map[string]any
			for t := 0; t < k; t++ {
				turn := map[string]any{
					"kind":               kinds[rng.Intn(len(kinds))],
					"action_tokens":      rng.Intn(4),
					"observation_tokens": rng.Intn(3),
				}
				if t == k-1 && answer {
					turn["kind"] = "answer"
					turn["observation_tokens"] = 0
				}
				if !attnsr && rng.Intn(5) > 0 {
					switch rng.Intn(6) {
					case 0:
						turn["delta"] = 0.0
					case 1:
						turn["delta"] = rng.NormFloat64() * 1e-7
					default:
						turn["delta"] = rng.NormFloat64() * math.Pow(10, float64(rng.Intn(4)-2))
					}
				}
				turns = append(turns, turn)
			}
			rec["turns"] = turns
			if attnsr && k >= 2 {
				var layers []map[string]any
				for l := 0; l < 1+rng.Intn(4); l++ {
					layers = append(layers, map[string]any{"layer": 8 + 2*l, "aa": graph(k), "ao": graph(k)})
				}
				rec["attention"] = layers
			}
			b, _ := json.Marshal(rec)
			lines = append(lines, b)
			if rng.Intn(8) == 0 {
				lines = append(lines, b) // repeated trajectory_id
			}
			if present == size && i == 0 && rng.Intn(5) == 0 {
				rec["trajectory_id"] = pid + "-late"
				lb, _ := json.Marshal(rec)
				lateLines = append(lateLines, lb)
			}
		}
	}
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	lines = append(lines, lateLines...)
	return append(bytes.Join(lines, []byte("\n")), '\n')
}

// closeEnough is the comparison of the cross-check: 1e-9 relative, with an
// absolute floor of 1e-12 for values that are zero up to rounding.
func closeEnough(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))+1e-12
}

func compareJSON(path string, a, b any) error {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: object vs %T", path, b)
		}
		if len(x) != len(y) {
			return fmt.Errorf("%s: keys %v vs %v", path, keys(x), keys(y))
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				return fmt.Errorf("%s: key %q missing in reference", path, k)
			}
			if err := compareJSON(path+"."+k, v, w); err != nil {
				return err
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: array of %d vs %v", path, len(x), b)
		}
		for i := range x {
			if err := compareJSON(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); err != nil {
				return err
			}
		}
	case float64:
		y, ok := b.(float64)
		if !ok || !closeEnough(x, y) {
			return fmt.Errorf("%s: %v vs reference %v", path, x, b)
		}
	default:
		if a != b {
			return fmt.Errorf("%s: %v vs reference %v", path, a, b)
		}
	}
	return nil
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestAgainstPythonReference runs offline.Compute and the independent
// Python implementation (testdata/reference.py) on the same random inputs
// and compares every output number.
func TestAgainstPythonReference(t *testing.T) {
	py := pyenvtest.Python(t)
	type scenario struct {
		name   string
		attnsr bool
		flags  []string
		cfg    func(*credit.Config)
	}
	scenarios := []scenario{
		{"lapo-backward", false, []string{"--tokens"}, func(c *credit.Config) {}},
		{"lapo-nogate-kinds", false, []string{"--no-gate", "--lambda", "0.3", "--eligible-kinds", "search,tool", "--no-answer-empty-segments-eligible", "--eps-ig", "1e-5"},
			func(c *credit.Config) {
				c.Gate, c.Lambda, c.EligibleKinds, c.NoAnswerEmptySegmentsEligible, c.EpsIG = false, 0.3, []string{"search", "tool"}, true, 1e-5
			}},
		{"attnsr-grpo", true, []string{"--method", "attnsr", "--tokens"}, func(c *credit.Config) { c.Method = credit.MethodAttnSR }},
		{"attnsr-grpo-params", true, []string{"--method", "attnsr", "--alpha", "0.6", "--rho", "0.7", "--eta", "0.2", "--temperature", "0.5", "--m-star", "0.3", "--ema-delta", "0.9"},
			func(c *credit.Config) {
				c.Method, c.Alpha, c.Rho, c.Eta, c.T, c.MStar, c.Delta = credit.MethodAttnSR, 0.6, 0.7, 0.2, 0.5, 0.3, 0.9
			}},
		{"attnsr-ppo", true, []string{"--method", "attnsr", "--attnsr-output", "ppo", "--beta", "0.5", "--tokens"},
			func(c *credit.Config) { c.Method, c.Output, c.Beta = credit.MethodAttnSR, credit.OutputPPO, 0.5 }},
	}
	for si, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for seed := int64(0); seed < 4; seed++ {
				rng := rand.New(rand.NewSource(100*int64(si) + seed))
				in := genInput(rng, sc.attnsr, 25)
				cfg := credit.DefaultConfig()
				sc.cfg(&cfg)
				tokens := false
				for _, f := range sc.flags {
					tokens = tokens || f == "--tokens"
				}
				var goOut, goDiag bytes.Buffer
				if err := Compute(bytes.NewReader(in), &goOut, &goDiag, cfg, WithTokens(tokens)); err != nil {
					t.Fatalf("seed %d: Compute: %v", seed, err)
				}
				cmd := exec.Command(py, append([]string{"testdata/reference.py"}, sc.flags...)...)
				cmd.Stdin = bytes.NewReader(in)
				var pyOut, pyDiag bytes.Buffer
				cmd.Stdout, cmd.Stderr = &pyOut, &pyDiag
				if err := cmd.Run(); err != nil {
					t.Fatalf("seed %d: reference.py: %v\n%s", seed, err, pyDiag.String())
				}
				gl := strings.Split(strings.TrimSpace(goOut.String()), "\n")
				pl := strings.Split(strings.TrimSpace(pyOut.String()), "\n")
				if len(gl) != len(pl) {
					t.Fatalf("seed %d: %d output lines, reference %d", seed, len(gl), len(pl))
				}
				if g, p := strings.Count(goDiag.String(), "\n"), strings.Count(pyDiag.String(), "\n"); g != p || g == 0 {
					t.Fatalf("seed %d: %d diagnostics, reference %d:\n%s\n%s", seed, g, p, goDiag.String(), pyDiag.String())
				}
				partial := 0
				for i := range gl {
					var a, b any
					if err := json.Unmarshal([]byte(gl[i]), &a); err != nil {
						t.Fatal(err)
					}
					if err := json.Unmarshal([]byte(pl[i]), &b); err != nil {
						t.Fatal(err)
					}
					if err := compareJSON(fmt.Sprintf("line %d", i+1), a, b); err != nil {
						t.Fatalf("seed %d: %v\ngo:  %s\npy:  %s", seed, err, gl[i], pl[i])
					}
					if a.(map[string]any)["partial"] == true {
						partial++
					}
				}
				if partial == 0 {
					t.Errorf("seed %d: no partial group exercised", seed)
				}
			}
		})
	}
}
