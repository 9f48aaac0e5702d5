// Package inspect reads samples back from a samples topic and prints them
// in a terminal as the monitor's sample view shows them on its page: the
// text turn by turn, every policy token colored by its advantage (or token
// reward), each turn's diagnostics; `creditflow inspect` is its command.
//
// Guarantees: reading commits nothing, joins no consumer group (it goes
// through monitor.Store) and creates no topic (a missing one is named); the JSON form of a view is exactly what the
// monitor answers on GET /api/v1/samples/{trajectory_id}; escape sequences
// are written only when asked for (color), and token text never sends a
// control character to the terminal (shown as \xHH).
package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/tokenizer"
)

// Query names the samples to read: one trajectory (and, with Compare, the
// same trajectory from a second topic), or the Best or the Worst N of the
// topic ranked By (monitor.ByReward or monitor.ByProcess).
type Query struct {
	Topic       string // samples topic
	Trajectory  string // a trajectory_id
	Compare     string // with Trajectory: a second samples topic (a replay)
	Best, Worst int
	By          string
	Scored      string // scored topic, read for each turn's S with and without ("": leave out)
}

// Read reads the samples of q through st as views, their tokens decoded
// with dec. A scored record that cannot be read is reported on warn and
// left out of its view.
func Read(ctx context.Context, st *monitor.Store, q Query, dec *tokenizer.Decoder, warn io.Writer) ([]*monitor.SampleView, error) {
	if err := checkTopics(ctx, st, &q, warn); err != nil {
		return nil, err
	}
	var views []*monitor.SampleView
	if q.Trajectory != "" {
		s, rec, err := st.Find(ctx, q.Topic, q.Trajectory)
		if err != nil {
			return nil, err
		}
		views = append(views, monitor.NewSampleView(q.Topic, s, rec.Partition, rec.Offset, rec.Time.UnixMilli(), dec))
		if q.Compare != "" {
			s, rec, err := st.Find(ctx, q.Compare, q.Trajectory)
			if err != nil {
				return nil, err
			}
			views = append(views, monitor.NewSampleView(q.Compare, s, rec.Partition, rec.Offset, rec.Time.UnixMilli(), dec))
		}
	} else {
		order, k := monitor.OrderBest, q.Best
		if q.Worst > 0 {
			order, k = monitor.OrderWorst, q.Worst
		}
		refs, err := st.Rank(ctx, q.Topic, order, q.By, k)
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			s, rec, err := st.At(ctx, r.Topic, r.Partition, r.Offset)
			if err != nil {
				return nil, err
			}
			views = append(views, monitor.NewSampleView(r.Topic, s, r.Partition, r.Offset, rec.Time.UnixMilli(), dec))
		}
	}
	if q.Scored != "" {
		for _, v := range views {
			sc, err := st.FindScored(ctx, q.Scored, v.PromptID, v.TrajectoryID, time.UnixMilli(v.CreatedAtMs).Add(-time.Minute))
			if err == nil {
				v.AddScored(sc)
			} else if !errors.Is(err, monitor.ErrNotFound) {
				fmt.Fprintf(warn, "creditflow inspect: S with/without of %s not read: %v\n", v.TrajectoryID, err)
			}
		}
	}
	return views, nil
}

// checkTopics makes sure reading q creates nothing: every topic q names is
// looked up first without letting the brokers create it (a partition
// lookup of a missing topic would, on a cluster that auto-creates topics).
// A missing samples topic (Topic, Compare) is an error naming it; a missing
// scored topic is reported on warn and left out.
func checkTopics(ctx context.Context, st *monitor.Store, q *Query, warn io.Writer) error {
	names := []string{q.Topic}
	if q.Compare != "" {
		names = append(names, q.Compare)
	}
	if q.Scored != "" {
		names = append(names, q.Scored)
	}
	missing, err := producers.MissingTopics(ctx, st.Brokers, st.Security, names...)
	if err != nil {
		return err
	}
	where := strings.Join(st.Brokers, ",")
	for _, m := range missing {
		switch m {
		case q.Topic:
			return fmt.Errorf("topic %s does not exist on %s (check --topic and --brokers; inspect creates nothing)", m, where)
		case q.Compare:
			return fmt.Errorf("--compare topic %s does not exist on %s (inspect creates nothing)", m, where)
		case q.Scored:
			fmt.Fprintf(warn, "creditflow inspect: scored topic %s does not exist on %s: S with and without each turn left out\n", m, where)
			q.Scored = ""
		}
	}
	return nil
}

// Print writes views to w: with asJSON one JSON object a line, else each
// view turn by turn (colored with color, by the advantage); with compare
// (views holds the same trajectory from two topics) differences are marked
// and counted.
func Print(w io.Writer, views []*monitor.SampleView, compare, asJSON, color bool) error {
	return PrintBy(w, views, compare, asJSON, color, ColorAdvantage)
}

// PrintBy is Print with the policy tokens colored by by (one of
// ColorChoices; a choice of the other method's quantities colors by the
// advantage).
func PrintBy(w io.Writer, views []*monitor.SampleView, compare, asJSON, color bool, by string) error {
	for i, v := range views {
		if asJSON {
			b, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("sample %s: %w", v.TrajectoryID, err)
			}
			fmt.Fprintln(w, string(b))
			continue
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		var other *monitor.SampleView
		if compare {
			other = views[1-i]
		}
		printSampleView(w, v, other, color, by)
	}
	if compare && !asJSON {
		fmt.Fprintln(w)
		fmt.Fprintln(w, differenceLine(views[0], views[1]))
	}
	return nil
}

// diffMask marks the policy tokens of v whose value (or id) differs in o;
// nil without o.
func diffMask(v, o *monitor.SampleView) []bool {
	if o == nil {
		return nil
	}
	a, _, _ := tokenValues(v)
	b, _, _ := tokenValues(o)
	same := len(o.Tokens) == len(v.Tokens)
	out := make([]bool, len(v.Tokens))
	for i := range out {
		out[i] = v.LossMask[i] == 1 && (!same || o.Tokens[i] != v.Tokens[i] || a[i] != b[i])
	}
	return out
}

// differenceLine counts the policy tokens whose value differs between a
// and b (the same trajectory in two topics).
func differenceLine(a, b *monitor.SampleView) string {
	if len(a.Tokens) != len(b.Tokens) {
		return fmt.Sprintf("differences: %s and %s hold different token sequences for %s", a.Topic, b.Topic, a.TrajectoryID)
	}
	va, _, _ := tokenValues(a)
	vb, _, _ := tokenValues(b)
	n, pol, most := 0, 0, 0.0
	for i := range va {
		if a.LossMask[i] == 0 {
			continue
		}
		pol++
		if d := math.Abs(va[i] - vb[i]); d != 0 || a.Tokens[i] != b.Tokens[i] {
			n++
			most = math.Max(most, d)
		}
	}
	return fmt.Sprintf("differences: %d of %d policy tokens differ between %s and %s (largest |difference| %.4g); reward %.4f vs %.4f",
		n, pol, a.Topic, b.Topic, most, a.Reward, b.Reward)
}

// ANSI escapes of the terminal view.
const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m" // off-policy text
)

// tokenValues returns each policy token's advantage, or its token reward
// (AttnSR ppo); NaN off policy.
func tokenValues(v *monitor.SampleView) (vals []float64, scale float64, what string) {
	arr, what := v.Advantages, "advantage"
	if arr == nil {
		arr, what = v.TokenRewards, "token reward"
	}
	vals = make([]float64, len(v.Tokens))
	for i := range vals {
		vals[i] = math.NaN()
		if v.LossMask[i] == 1 && i < len(arr) {
			vals[i] = float64(arr[i])
			scale = math.Max(scale, math.Abs(vals[i]))
		}
	}
	if scale == 0 {
		scale = 1
	}
	return vals, scale, what
}

// diverging is the page's scale: red (negative) – white (0) – blue
// (positive), |x| ≤ m; it also says whether white text reads better.
func diverging(x, m float64) (r, g, b int, light bool) {
	t := math.Max(-1, math.Min(1, x/m))
	c := [3]float64{33, 102, 172}
	if t < 0 {
		c = [3]float64{178, 24, 43}
	}
	a := math.Abs(t)
	mix := func(k int) int { return int(math.Round(255 + (c[k]-255)*a)) }
	return mix(0), mix(1), mix(2), a > 0.6
}

// safe makes token text printable on a terminal: control characters other
// than newline and tab are shown as \xHH, never sent.
func safe(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) }

func fmtOpt(x *float64) string {
	if x == nil {
		return "–"
	}
	return fmt.Sprintf("%.4f", *x)
}

// printSampleView prints v turn by turn; with color, policy tokens on
// the background of what they are colored by (by) and off-policy text
// dimmed; without, the values are in the turn lines (and, for token
// rewards, after each non-zero token). With other (the same trajectory in
// another topic), tokens whose advantage (token reward) differs are
// underlined (colors) or bracketed ⟦…⟧ (no colors) and turn lines whose
// diagnostics differ end in "  (differs)". The scale is shared.
func printSampleView(w io.Writer, v, other *monitor.SampleView, color bool, by string) {
	vals, _, _ := tokenValues(v)
	cl := newColoring(v, other, by)
	diff := diffMask(v, other)
	differs := func(i int) bool { return diff != nil && diff[i] }
	bold := func(s string) string {
		if color {
			return ansiBold + s + ansiReset
		}
		return s
	}
	fmt.Fprintf(w, "%s  %s %d@%d  %s → %s\n", bold("trajectory "+v.TrajectoryID), v.Topic, v.Partition, v.Offset, v.Method, v.Output)
	proc := "–"
	if v.Process != nil {
		proc = fmt.Sprintf("%.4f", *v.Process)
	}
	partial := ""
	if v.Partial {
		partial = " (partial)"
	}
	fmt.Fprintf(w, "reward %.4f  A_out %.4f  process %s  group %s member %d of %d%s  policy v%d", v.Reward, v.OutcomeAdvantage, proc, v.PromptID, v.SampleIndex, v.GroupSize, partial, v.PolicyVersion)
	if v.ScorerPolicyVersion != nil {
		fmt.Fprintf(w, " (scorer v%d)", *v.ScorerPolicyVersion)
	}
	policy := 0
	for _, x := range v.LossMask {
		policy += x
	}
	fmt.Fprintf(w, "  %d tokens (%d policy, %s)\n", len(v.Tokens), policy, v.Tokenizer)
	if a := v.AttnSR; a != nil {
		fmt.Fprintf(w, "AttnSR confidence %.4f  focus %.4f  consensus %.4f  baseline %.4f  budget %.4f\n", a.Confidence, a.Focus, a.Consensus, a.Baseline, a.Budget)
	}
	if color {
		fmt.Fprintln(w, cl.legend(v))
	}
	if !v.TurnsExact {
		fmt.Fprintln(w, "note: turn boundaries inside touching actions are approximate (turns_exact = false)")
	}
	text := func(a, b int) {
		var sb strings.Builder
		sb.WriteString("  ")
		for i := a; i < b; i++ {
			s := strings.ReplaceAll(safe(v.Text[i]), "\n", "\n  ")
			switch {
			case v.LossMask[i] == 0 && color:
				sb.WriteString(ansiDim + s + ansiReset)
			case v.LossMask[i] == 0:
				sb.WriteString(s)
			case color && math.IsNaN(cl.vals[i]): // no value of what the tokens are colored by
				if differs(i) {
					s = "\x1b[4m" + s + ansiReset
				}
				sb.WriteString(s)
			case color:
				bg, fg := cl.bg(cl.vals[i])
				if differs(i) {
					fg += "\x1b[4m" // underlined: another value in the other topic
				}
				// Color each line on its own so that newlines do not paint the margin.
				lines := strings.Split(s, "\n  ")
				for j, l := range lines {
					if j > 0 {
						sb.WriteString("\n  ")
					}
					sb.WriteString(bg + fg + l + ansiReset)
				}
			default:
				if differs(i) && (i == a || !differs(i-1)) {
					sb.WriteString("⟦")
				}
				sb.WriteString(s)
				if differs(i) && (i+1 == b || !differs(i+1)) {
					sb.WriteString("⟧")
				}
				if v.Output == "token_rewards" && vals[i] != 0 {
					fmt.Fprintf(&sb, "[%+.4f]", vals[i])
				}
			}
		}
		fmt.Fprintln(w, sb.String())
	}
	fmt.Fprintln(w, bold("prompt")+" (off-policy)")
	text(0, v.PromptEnd)
	for _, t := range v.Turns {
		line := fmt.Sprintf("turn %d · %s", t.Index, t.Kind)
		if v.Method == schemas.MethodAttnSR {
			line += fmt.Sprintf("  p_k %s  s_k %s  w̃ %s", fmtOpt(t.P), fmtOpt(t.StepReward), fmtOpt(t.Weight))
		} else {
			el := "not eligible"
			if t.Eligible {
				el = "eligible"
			}
			line += fmt.Sprintf(" · %s  Δ %s  S with %s  S without %s  z %s  z̃ %s  gate %d  A_proc %.4f", el,
				fmtOpt(t.Delta), fmtOpt(t.With), fmtOpt(t.Without), fmtOpt(t.Z), fmtOpt(t.ZNorm), t.Gate, t.ProcessAdvantage)
		}
		if v.Output != "token_rewards" {
			line += fmt.Sprintf("  advantage %.4f", t.Advantage)
		}
		if md := colorModes[cl.by]; color && md.turn != nil {
			x := md.turn(&t)
			line = cl.mark(md.symbol+" "+fmtOpt(x), x, line)
		}
		if other != nil && t.Index < len(other.Turns) {
			if o := other.Turns[t.Index]; o.Advantage != t.Advantage || o.ProcessAdvantage != t.ProcessAdvantage || o.Gate != t.Gate ||
				fmtOpt(o.Delta) != fmtOpt(t.Delta) || fmtOpt(o.ZNorm) != fmtOpt(t.ZNorm) || fmtOpt(o.StepReward) != fmtOpt(t.StepReward) || fmtOpt(o.Weight) != fmtOpt(t.Weight) {
				line += "  (differs)"
			}
		}
		fmt.Fprintln(w, bold(line))
		fmt.Fprintf(w, " action (tokens %d–%d)\n", t.Action[0], t.Action[1])
		text(t.Action[0], t.Action[1])
		if t.Observation[1] > t.Observation[0] {
			fmt.Fprintf(w, " observation (off-policy, tokens %d–%d)\n", t.Observation[0], t.Observation[1])
			text(t.Observation[0], t.Observation[1])
		}
	}
}
