package inspect

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/monitor"
)

func ptr(x float64) *float64 { return &x }

// searchView is a LAPO sample shaped like the demo's q000018-2: three
// searches with Δ 0.0223, 0.2253 (the informative one) and 0.0263, whose z̃
// all saturate near 0.85, and a final answer that is not eligible. Tokens:
// prompt [0,2), then per turn 2 action tokens and 1 observation token.
func searchView() *monitor.SampleView {
	v := &monitor.SampleView{SampleRef: monitor.SampleRef{TrajectoryID: "q000018-2", Method: "lapo", Output: "advantages", OutcomeAdvantage: 0.8165}}
	v.PromptEnd = 2
	deltas := []*float64{ptr(0.0223), ptr(0.2253), ptr(0.0263), nil}
	zn := []*float64{ptr(0.8053), ptr(0.8894), ptr(0.8459), nil}
	adv := []float64{1.2191, 1.2612, 1.2394, 0.8165}
	v.Tokens = []int32{1, 2}
	v.LossMask = []int{0, 0}
	v.Advantages = []float32{0, 0}
	for k := range deltas {
		a := len(v.Tokens)
		v.Tokens = append(v.Tokens, 10, 11, 12)
		v.LossMask = append(v.LossMask, 1, 1, 0)
		v.Advantages = append(v.Advantages, float32(adv[k]), float32(adv[k]), 0)
		pa := 0.0
		if zn[k] != nil {
			pa = *zn[k]
		}
		v.Turns = append(v.Turns, monitor.TurnView{Index: k, Kind: "search", Eligible: deltas[k] != nil, Action: [2]int{a, a + 2},
			Observation: [2]int{a + 2, a + 3}, Delta: deltas[k], ZNorm: zn[k], ProcessAdvantage: pa, Advantage: adv[k], Gate: 1})
	}
	v.Text = make([]string, len(v.Tokens))
	for i := range v.Text {
		v.Text[i] = fmt.Sprintf("t%d ", i)
	}
	v.TurnsExact = true
	return v
}

// rgb is the background color token i gets.
func rgb(c *coloring, i int) [3]int {
	r, g, b, _ := diverging(c.vals[i]-c.center, c.m)
	return [3]int{r, g, b}
}

func dist(a, b [3]int) float64 {
	return math.Sqrt(float64((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2])))
}

// TestColorByDeltaShowsTheInformativeTurn: by the advantage the three
// searches look alike; by Δ the informative one is drawn at full strength
// and the others close to white.
func TestColorByDeltaShowsTheInformativeTurn(t *testing.T) {
	v := searchView()
	first := func(k int) int { return v.Turns[k].Action[0] }

	adv := newColoring(v, nil, ColorAdvantage)
	if d := math.Max(dist(rgb(adv, first(1)), rgb(adv, first(0))), dist(rgb(adv, first(1)), rgb(adv, first(2)))); d > 12 {
		t.Fatalf("by advantage the searches differ by %.1f: the premise of the test no longer holds", d)
	}

	c := newColoring(v, nil, ColorDelta)
	if c.by != ColorDelta || c.m != 0.2253 || c.center != 0 {
		t.Fatalf("coloring %+v", c)
	}
	for k, want := range []float64{0.0223, 0.2253, 0.0263} {
		a := v.Turns[k].Action
		for i := a[0]; i < a[1]; i++ {
			if c.vals[i] != want {
				t.Fatalf("turn %d token %d colored by %v, want Δ %v", k, i, c.vals[i], want)
			}
		}
		if o := v.Turns[k].Observation[0]; !math.IsNaN(c.vals[o]) {
			t.Fatalf("observation token %d has a value %v", o, c.vals[o])
		}
	}
	if x := c.vals[first(3)]; !math.IsNaN(x) {
		t.Fatalf("the answer (not eligible) has Δ %v for a color", x)
	}
	if got := rgb(c, first(1)); got != [3]int{33, 102, 172} {
		t.Fatalf("informative turn drawn %v, want the scale's full blue", got)
	}
	for _, k := range []int{0, 2} {
		if d := dist(rgb(c, first(1)), rgb(c, first(k))); d < 150 {
			t.Fatalf("turn %d is %.1f from the informative turn's color, want ≥ 150", k, d)
		}
	}

	z := newColoring(v, nil, ColorZNorm)
	if z.m != 0.8894 || z.vals[first(0)] != 0.8053 {
		t.Fatalf("z̃: scale %v, turn 0 %v", z.m, z.vals[first(0)])
	}
	pa := newColoring(v, nil, ColorProcessAdvantage)
	if pa.vals[first(3)] != 0 || pa.vals[first(2)] != 0.8459 {
		t.Fatalf("A_proc: %v %v", pa.vals[first(3)], pa.vals[first(2)])
	}
	pr := newColoring(v, nil, ColorProcess)
	if got := pr.vals[first(1)]; math.Abs(got-(float64(float32(1.2612))-0.8165)) > 1e-12 {
		t.Fatalf("process part %v", got)
	}
}

// TestColorChoicesFitTheMethod: AttnSR's per-step quantities, w̃ around 1,
// and a choice of the other method falling back to the advantage.
func TestColorChoicesFitTheMethod(t *testing.T) {
	v := searchView()
	if c := newColoring(v, nil, ColorP); c.by != ColorAdvantage {
		t.Fatalf("p_k on a LAPO sample colors by %s", c.by)
	}
	v.Method = "attnsr"
	for k := range v.Turns {
		v.Turns[k].P, v.Turns[k].StepReward, v.Turns[k].Weight = ptr([]float64{0.1, 0.7, 0.2, 0}[k]), ptr([]float64{-0.01, -0.07, -0.02, 0}[k]), ptr([]float64{0.9, 1.3, 0.95, 1}[k])
	}
	v.Turns[3].P, v.Turns[3].StepReward = nil, nil // the final step has none
	if c := newColoring(v, nil, ColorDelta); c.by != ColorAdvantage {
		t.Fatalf("Δ on an AttnSR sample colors by %s", c.by)
	}
	w := newColoring(v, nil, ColorWeight)
	if w.center != 1 || math.Abs(w.m-0.3) > 1e-12 {
		t.Fatalf("w̃: center %v, scale %v", w.center, w.m)
	}
	if l := stripANSI(w.legend(v)); !strings.HasPrefix(l, "w̃ of the step, on its policy tokens: 0.7 ") || !strings.Contains(l, " 1.3 ") {
		t.Fatalf("w̃ legend %q", l)
	}
	if got := rgb(w, v.Turns[3].Action[0]); got != [3]int{255, 255, 255} {
		t.Fatalf("w̃ = 1 drawn %v, want white", got)
	}
	p := newColoring(v, nil, ColorP)
	if p.m != 0.7 || !math.IsNaN(p.vals[v.Turns[3].Action[0]]) || !strings.HasPrefix(stripANSI(p.legend(v)), "p_k of the step, on its policy tokens: 0 ") {
		t.Fatalf("p_k: scale %v, legend %q", p.m, stripANSI(p.legend(v)))
	}
	if s := newColoring(v, nil, ColorStepReward); s.m != 0.07 {
		t.Fatalf("s_k scale %v", s.m)
	}
	v.Output, v.TokenRewards, v.Advantages = "token_rewards", v.Advantages, nil
	if c := newColoring(v, nil, ColorProcess); c.by != ColorAdvantage {
		t.Fatalf("process part of token rewards: %s", c.by)
	}
	for _, by := range ColorChoices {
		if !ValidColor(by) {
			t.Fatalf("%s not valid", by)
		}
	}
	if ValidColor("luck") {
		t.Fatal("luck is a color choice")
	}
}

// TestPrintByColors: on a terminal the informative turn's tokens and its Δ
// are printed on the scale's full blue and the others nearly white; without
// colors the choice changes nothing.
func TestPrintByColors(t *testing.T) {
	v := searchView()
	var plain, plainBy, col bytes.Buffer
	if err := Print(&plain, []*monitor.SampleView{v}, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := PrintBy(&plainBy, []*monitor.SampleView{v}, false, false, false, ColorDelta); err != nil {
		t.Fatal(err)
	}
	if plain.String() != plainBy.String() {
		t.Fatalf("without colors --color-by changed the output:\n%s\n%s", plain.String(), plainBy.String())
	}
	if err := PrintBy(&col, []*monitor.SampleView{v}, false, false, true, ColorDelta); err != nil {
		t.Fatal(err)
	}
	out := col.String()
	blue := "\x1b[48;2;33;102;172m"
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[2], "Δ of the turn, on its policy tokens: -0.225 ") {
		t.Fatalf("legend %q", stripANSI(lines[2]))
	}
	turn := func(k int) (head, action string) {
		for i, l := range lines {
			if strings.HasPrefix(stripANSI(l), fmt.Sprintf("turn %d ", k)) {
				return l, lines[i+2]
			}
		}
		t.Fatalf("no turn %d in\n%s", k, out)
		return "", ""
	}
	head, action := turn(1)
	if !strings.Contains(head, blue+"\x1b[38;2;255;255;255mΔ 0.2253\x1b[49m") || strings.Count(action, blue) != 2 {
		t.Fatalf("informative turn not on full blue:\n%q\n%q", head, action)
	}
	for _, k := range []int{0, 2} {
		head, action := turn(k)
		if strings.Contains(head+action, blue) || !strings.Contains(action, "\x1b[48;2;2") { // 2xx,2xx,2xx: near white
			t.Fatalf("turn %d:\n%q\n%q", k, head, action)
		}
	}
	if _, action := turn(3); strings.Contains(action, "\x1b[48;2;") {
		t.Fatalf("the answer (no Δ) is colored: %q", action)
	}
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
