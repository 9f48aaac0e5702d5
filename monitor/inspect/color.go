package inspect

import (
	"fmt"
	"math"
	"strings"

	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/schemas"
)

// What the policy tokens' backgrounds show (--color-by; the page's "color
// by"): a per-token quantity, or a per-turn one drawn on every policy token
// of its turn. The advantage barely tells turns apart where z̃ saturates
// (every positive Δ gets z̃ near 1); Δ itself shows which turn mattered.
const (
	ColorAdvantage        = "advantage"         // the advantage, or the token reward (AttnSR ppo)
	ColorProcess          = "process"           // advantage − A_out: the part the process credit added
	ColorDelta            = "delta"             // LAPO Δ of the turn
	ColorZNorm            = "z_norm"            // LAPO z̃ of the turn
	ColorProcessAdvantage = "process_advantage" // LAPO A_proc of the turn
	ColorP                = "p"                 // AttnSR p_k of the step
	ColorStepReward       = "step_reward"       // AttnSR s_k of the step
	ColorWeight           = "weight"            // AttnSR w̃ of the step
)

// ColorChoices lists every choice, in the order the help gives them.
var ColorChoices = []string{ColorAdvantage, ColorProcess, ColorDelta, ColorZNorm, ColorProcessAdvantage, ColorP, ColorStepReward, ColorWeight}

// colorMode describes a choice: the turn field it reads (none: per token),
// the method it belongs to, its symbol, and its scale's center (w̃: 1) and
// whether values are never negative (p_k, w̃: the legend starts at 0 at
// the lowest).
type colorMode struct {
	method      string // schemas.MethodLAPO or schemas.MethodAttnSR; "" for every method
	symbol      string
	turn        func(t *monitor.TurnView) *float64
	center      float64
	nonNegative bool
}

var colorModes = map[string]colorMode{
	ColorAdvantage:        {},
	ColorProcess:          {},
	ColorDelta:            {method: schemas.MethodLAPO, symbol: "Δ", turn: func(t *monitor.TurnView) *float64 { return t.Delta }},
	ColorZNorm:            {method: schemas.MethodLAPO, symbol: "z̃", turn: func(t *monitor.TurnView) *float64 { return t.ZNorm }},
	ColorProcessAdvantage: {method: schemas.MethodLAPO, symbol: "A_proc", turn: func(t *monitor.TurnView) *float64 { return &t.ProcessAdvantage }},
	ColorP:                {method: schemas.MethodAttnSR, symbol: "p_k", turn: func(t *monitor.TurnView) *float64 { return t.P }, nonNegative: true},
	ColorStepReward:       {method: schemas.MethodAttnSR, symbol: "s_k", turn: func(t *monitor.TurnView) *float64 { return t.StepReward }},
	ColorWeight:           {method: schemas.MethodAttnSR, symbol: "w̃", turn: func(t *monitor.TurnView) *float64 { return t.Weight }, center: 1, nonNegative: true},
}

// ValidColor reports whether by is one of ColorChoices.
func ValidColor(by string) bool {
	_, ok := colorModes[by]
	return ok
}

// coloring is what colors the tokens of one printed view: by (the choice
// that fits its method: a choice of the other method falls back to the
// advantage), each token's value (NaN off policy or where the quantity has
// none: a turn that is not eligible, AttnSR's final step), and the scale:
// |value − center| ≤ m.
type coloring struct {
	by        string
	vals      []float64
	center, m float64
}

// fits returns by if it applies to v's method, else ColorAdvantage.
func fits(by string, v *monitor.SampleView) string {
	if md, ok := colorModes[by]; ok && (md.method == "" || md.method == v.Method) {
		if by == ColorProcess && v.Advantages == nil {
			return ColorAdvantage // token rewards have no outcome part to take away
		}
		return by
	}
	return ColorAdvantage
}

// colorValues returns the value every token of v is colored by under by.
func colorValues(v *monitor.SampleView, by string) []float64 {
	md := colorModes[by]
	if md.turn == nil {
		vals, _, _ := tokenValues(v)
		if by == ColorProcess {
			for i := range vals {
				vals[i] -= v.OutcomeAdvantage
			}
		}
		return vals
	}
	vals := make([]float64, len(v.Tokens))
	for i := range vals {
		vals[i] = math.NaN()
	}
	for k := range v.Turns {
		t := &v.Turns[k]
		x := md.turn(t)
		if x == nil {
			continue
		}
		for i := t.Action[0]; i < t.Action[1] && i < len(vals); i++ {
			if v.LossMask[i] == 1 {
				vals[i] = *x
			}
		}
	}
	return vals
}

// newColoring colors v (and other, the same trajectory from a second topic,
// on the same scale) by by.
func newColoring(v, other *monitor.SampleView, by string) *coloring {
	by = fits(by, v)
	c := &coloring{by: by, vals: colorValues(v, by), center: colorModes[by].center}
	grow := func(vals []float64) {
		for _, x := range vals {
			if !math.IsNaN(x) {
				c.m = math.Max(c.m, math.Abs(x-c.center))
			}
		}
	}
	grow(c.vals)
	if other != nil {
		grow(colorValues(other, fits(by, other)))
	}
	if !(c.m > 0) {
		c.m = 1
	}
	return c
}

// bg returns the background escape of x on c's scale and the foreground
// that reads on it.
func (c *coloring) bg(x float64) (bg, fg string) {
	r, g, b, light := diverging(x-c.center, c.m)
	fg = "\x1b[38;2;17;24;39m"
	if light {
		fg = "\x1b[38;2;255;255;255m"
	}
	return fmt.Sprintf("\x1b[48;2;%d;%d;%dm", r, g, b), fg
}

// legend is the scale's line: what the colors show, from the low end to the
// high end.
func (c *coloring) legend(v *monitor.SampleView) string {
	md := colorModes[c.by]
	var what string
	switch {
	case md.turn != nil:
		what = md.symbol + " of the turn, on its policy tokens"
		if md.method == schemas.MethodAttnSR {
			what = md.symbol + " of the step, on its policy tokens"
		}
	case c.by == ColorProcess:
		what = "advantage − A_out per policy token"
	case v.Advantages == nil:
		what = "token reward per policy token"
	default:
		what = "advantage per policy token"
	}
	lo := c.center - c.m
	if md.nonNegative {
		lo = math.Max(lo, 0)
	}
	hi := c.center + c.m
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %.3g ", what, lo)
	for i := 0; i <= 10; i++ {
		b, _ := c.bg(lo + (hi-lo)*float64(i)/10)
		sb.WriteString(b + "  ")
	}
	fmt.Fprintf(&sb, "%s %.3g   %soff-policy text%s", ansiReset, hi, ansiDim, ansiReset)
	if md.turn != nil {
		sb.WriteString("   no " + md.symbol + ": plain")
	}
	return sb.String()
}

// mark paints the value of the field the tokens are colored by in a turn
// line (its key is field) with its color, keeping the line's bold.
func (c *coloring) mark(field string, x *float64, text string) string {
	if x == nil || !strings.Contains(text, field) {
		return text
	}
	b, fg := c.bg(*x)
	return strings.Replace(text, field, b+fg+field+"\x1b[49m\x1b[39m", 1)
}
