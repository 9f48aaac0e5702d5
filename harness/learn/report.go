package learn

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Comparison is several runs: each method on each seed.
type Comparison struct {
	Runs []Summary `json:"runs"`
}

// keyer gives a run's key: its arm and world ("arm/world"); in a comparison whose runs
// had judges of different noise (a noise sweep) the world part also names
// the noise, so that arms are compared only at one level.
func (c Comparison) keyer() func(Summary) string {
	mixed := c.mixedNoise()
	return func(r Summary) string {
		k := r.Arm() + "/" + r.World
		if mixed {
			k += fmt.Sprintf(", judge noise %g", noiseOf(r))
		}
		return k
	}
}

func noiseOf(r Summary) float64 {
	if r.Settings == nil {
		return 0
	}
	return r.Settings.JudgeNoise
}

// mixedNoise says whether the runs that record their settings had judges
// of more than one noise.
func (c Comparison) mixedNoise() bool {
	first := -1.0
	for _, r := range c.Runs {
		if r.Settings == nil {
			continue
		}
		if first < 0 {
			first = r.Settings.JudgeNoise
		} else if r.Settings.JudgeNoise != first {
			return true
		}
	}
	return false
}

// methods are the comparison's keys (arm/world) in the order first seen.
func (c Comparison) methods() []string {
	var out []string
	seen := map[string]bool{}
	key := c.keyer()
	for _, r := range c.Runs {
		k := key(r)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func (c Comparison) of(key string) []Summary {
	var out []Summary
	keyOf := c.keyer()
	for _, r := range c.Runs {
		if keyOf(r) == key {
			out = append(out, r)
		}
	}
	return out
}

func meanSD(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return m, math.Sqrt(v)
}

// median of xs (the mean of the two middle values of an even count).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// stepsTo is the first trainer step at which held-out success reached
// target (-1: never).
func stepsTo(s Summary, target float64) int {
	for _, e := range s.Eval {
		if e.SuccessRate >= target {
			return e.TrainerStep
		}
	}
	return -1
}

// auc is the mean held-out success over the evaluated versions (area under
// the learning curve, per step).
func auc(s Summary) float64 {
	if len(s.Eval) == 0 {
		return 0
	}
	t := 0.0
	for _, e := range s.Eval {
		t += e.SuccessRate
	}
	return t / float64(len(s.Eval))
}

// Title names the methods, the world when the runs share one, the judge's
// noise when there is one, and the seeds.
func (c Comparison) Title() string {
	var ms []string
	world, one := "", true
	seeds := 0
	for i, k := range c.methods() {
		m, w := splitKey(k)
		if !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
		if i == 0 {
			world = w
		}
		one = one && w == world
		seeds = max(seeds, len(c.of(k)))
	}
	t := "creditflow learn: " + strings.Join(ms, " vs ")
	if len(ms) > 4 { // the legend names them
		t = fmt.Sprintf("creditflow learn: %d arms", len(ms))
	}
	if one && world != "" {
		t += " on the " + world + " world"
	}
	if c.mixedNoise() {
		t += ", judges of several noise levels"
	} else if len(c.Runs) > 0 && c.Runs[0].Settings != nil && c.Runs[0].Settings.JudgeNoise > 0 {
		t += fmt.Sprintf(", the judge wrong %.0f%% of the time", 100*c.Runs[0].Settings.JudgeNoise)
	}
	return t + fmt.Sprintf(", %d seeds each", seeds)
}

// Markdown is the comparison table: one row per run, then mean ± standard
// deviation per method, then the differences between methods with their
// permutation p-values (stats.go).
func (c Comparison) Markdown() string {
	var b strings.Builder
	b.WriteString("| method | world | seed | initial success | final success | gain | mean success over versions (AUC) | first step ≥ 0.8 | trajectories | seconds |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range c.Runs {
		st := "never"
		if s := stepsTo(r, 0.8); s >= 0 {
			st = fmt.Sprint(s)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %.3f | %+.3f | %.3f | %s | %d | %.0f |\n", r.Arm(), r.World, r.Seed,
			r.InitialSuccess, r.FinalSuccess, r.FinalSuccess-r.InitialSuccess, auc(r), st, r.TrainerTrajectories, r.Seconds)
	}
	b.WriteString("\n| method | world | seeds | final success (mean ± sd) | gain (mean ± sd) | AUC (mean ± sd) | reached 0.8 | its first step (median of those that did) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range c.methods() {
		rs := c.of(k)
		var fin, gain, a, reached []float64
		for _, r := range rs {
			fin = append(fin, r.FinalSuccess)
			gain = append(gain, r.FinalSuccess-r.InitialSuccess)
			a = append(a, auc(r))
			if st := stepsTo(r, reachTarget); st >= 0 {
				reached = append(reached, float64(st))
			}
		}
		med := "—"
		if len(reached) > 0 {
			med = strconv.FormatFloat(median(reached), 'f', -1, 64)
		}
		fm, fs := meanSD(fin)
		gm, gs := meanSD(gain)
		am, as := meanSD(a)
		m, w := splitKey(k)
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f ± %.3f | %+.3f ± %.3f | %.3f ± %.3f | %d of %d | %s |\n", m, w, len(rs), fm, fs, gm, gs, am, as,
			len(reached), len(rs), med)
	}
	b.WriteString(c.differencesMarkdown())
	b.WriteString(c.allocationMarkdown())
	return b.String()
}

// curve is mean and spread (min, max) of held-out success per x over a
// method's runs; x is the trainer step or the trajectories consumed.
type point struct{ x, mean, lo, hi float64 }

func (c Comparison) curve(key string, byTrajectories bool) []point {
	rs := c.of(key)
	// Runs share the evaluation schedule (one per step); align by step.
	byStep := map[int][]float64{}
	xOf := map[int][]float64{}
	for _, r := range rs {
		for _, e := range r.Eval {
			byStep[e.TrainerStep] = append(byStep[e.TrainerStep], e.SuccessRate)
			xOf[e.TrainerStep] = append(xOf[e.TrainerStep], float64(e.Trajectories))
		}
	}
	var steps []int
	for s := range byStep {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	var out []point
	for _, s := range steps {
		ys := byStep[s]
		m, _ := meanSD(ys)
		lo, hi := ys[0], ys[0]
		for _, y := range ys {
			lo, hi = math.Min(lo, y), math.Max(hi, y)
		}
		x := float64(s)
		if byTrajectories {
			x, _ = meanSD(xOf[s])
		}
		out = append(out, point{x, m, lo, hi})
	}
	return out
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"}

// SVG draws held-out success against trainer steps (left) and against
// trajectories consumed (right): each method's mean over seeds as a line,
// its min–max band shaded. Self-contained (no fonts or scripts to fetch).
func (c Comparison) SVG(title string) string {
	const W, pw, ph, top, left = 980, 400, 280, 50, 60
	keys := c.methods()
	legend := make([]string, len(keys))
	perRow := 2 // the legend: two arms a row, or one where a label would run into the next
	for i, k := range keys {
		legend[i] = fmt.Sprintf("%s (mean of %d seeds, band: min–max)", strings.Replace(k, "/", " on ", 1), len(c.of(k)))
		if 20+7*len([]rune(legend[i])) > 400 { // ≈ 7 px a character at 12 px sans-serif
			perRow = 1
		}
	}
	H := 420 + 16*max(0, (len(keys)-1)/perRow)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fs := 15.0 // a long title (many arms) in a smaller font, within the picture
	if n := len([]rune(title)); n > 110 {
		fs = max(9, math.Round(16500/float64(n))/10)
	}
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="%g" font-weight="bold">%s</text>`+"\n", left, fs, esc(title))
	for panel, byTraj := range []bool{false, true} {
		x0 := left + panel*(pw+90)
		xmax := 1.0
		for _, k := range keys {
			for _, p := range c.curve(k, byTraj) {
				xmax = math.Max(xmax, p.x)
			}
		}
		X := func(x float64) float64 { return float64(x0) + x/xmax*pw }
		Y := func(y float64) float64 { return float64(top) + (1-y)*ph }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, top, pw, ph)
		for _, y := range []float64{0, 0.25, 0.5, 0.75, 1} {
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n",
				x0, x0+pw, Y(y), Y(y), x0-6, Y(y)+4, y)
		}
		for i := 0; i <= 4; i++ {
			x := xmax * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", X(x), top+ph+16, x)
		}
		label := "trainer steps (policy versions)"
		if byTraj {
			label = "trajectories consumed by the trainer"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+pw/2, top+ph+34, label)
		fmt.Fprintf(&b, `<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle">held-out success</text>`+"\n",
			x0-42, top+ph/2, x0-42, top+ph/2)
		for i, k := range keys {
			col := palette[i%len(palette)]
			pts := c.curve(k, byTraj)
			if len(pts) == 0 {
				continue
			}
			var band, line []string
			for _, p := range pts {
				band = append(band, fmt.Sprintf("%.1f,%.1f", X(p.x), Y(p.hi)))
				line = append(line, fmt.Sprintf("%.1f,%.1f", X(p.x), Y(p.mean)))
			}
			for j := len(pts) - 1; j >= 0; j-- {
				band = append(band, fmt.Sprintf("%.1f,%.1f", X(pts[j].x), Y(pts[j].lo)))
			}
			fmt.Fprintf(&b, `<polygon points="%s" fill="%s" fill-opacity="0.15" stroke="none"/>`+"\n", strings.Join(band, " "), col)
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), col)
		}
	}
	for i := range keys {
		col := palette[i%len(palette)]
		y := top + ph + 50 + 16*(i/perRow)
		x := left + (i%perRow)*400
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, y-4, col, x+20, y, esc(legend[i]))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
