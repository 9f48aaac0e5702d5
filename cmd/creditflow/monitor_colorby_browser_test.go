package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image/png"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/monitor"
)

// informativeSample returns a LAPO sample of topic whose world knows its
// informative turn (harness/synth, the demo's seed and group size) with at
// least two eligible turns, whose Δ is largest on that turn and at least
// three times every other |Δ| — preferably prefer (the example of
// docs/monitor.md), else one where every Δ is positive, so that z̃ saturates
// on every turn (the case of the advantage looking alike).
func informativeSample(t *testing.T, base, topic, prefer string, seed uint64, groupSize int) (*monitor.SampleView, int) {
	gen := synth.Default()
	gen.Seed, gen.GroupSize = seed, groupSize
	var refs []monitor.SampleRef
	getJSON(t, base+"api/v1/samples?order=recent&limit=256&topic="+url.QueryEscape(topic), &refs)
	var fallback, positive *monitor.SampleView
	fallbackTurn, positiveTurn := -1, -1
	for _, r := range refs {
		var g int
		if _, err := fmt.Sscanf(r.PromptID, "q%d", &g); err != nil {
			continue
		}
		traj, truth := gen.Generate(g, int(r.SampleIndex))
		if traj.TrajectoryID != r.TrajectoryID || truth.Informative < 0 {
			continue
		}
		var v monitor.SampleView
		getJSON(t, base+"api/v1/samples/"+url.PathEscape(r.TrajectoryID)+"?topic="+url.QueryEscape(topic), &v)
		inf := truth.Informative
		if inf >= len(v.Turns) || v.Turns[inf].Delta == nil {
			continue
		}
		top, n, allPos := *v.Turns[inf].Delta, 0, true
		clear := top > 0
		for k, tr := range v.Turns {
			if tr.Delta == nil {
				continue
			}
			n++
			allPos = allPos && *tr.Delta > 0
			if k != inf && 3*math.Abs(*tr.Delta) > top {
				clear = false
			}
		}
		if n < 2 || !clear {
			continue
		}
		if v.TrajectoryID == prefer {
			return &v, inf
		}
		if allPos && positive == nil {
			positive, positiveTurn = &v, inf
		}
		if fallback == nil {
			fallback, fallbackTurn = &v, inf
		}
	}
	if positive != nil {
		return positive, positiveTurn
	}
	if fallback == nil {
		t.Fatalf("no sample of %s among %d has an informative turn with a clearly largest Δ", topic, len(refs))
	}
	return fallback, fallbackTurn
}

// rgbOf parses a computed CSS color "rgb(r, g, b)".
func rgbOf(t *testing.T, css string) [3]float64 {
	t.Helper()
	var r, g, b float64
	if _, err := fmt.Sscanf(css, "rgb(%g, %g, %g)", &r, &g, &b); err != nil {
		t.Fatalf("color %q: %v", css, err)
	}
	return [3]float64{r, g, b}
}

func rgbDist(a, b [3]float64) float64 {
	return math.Sqrt((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2]))
}

// turnColors reads the page's sample view: per turn, the background of each
// policy token of its action and the value it shows (data-v), and the
// selected chip's background.
type turnColors struct {
	Turn  int
	BG    []string
	V     []string
	Chip  string
	Sel   string
	NoVal int
}

func readTurnColors(t *testing.T, bctx context.Context) []turnColors {
	t.Helper()
	out, err := chromedp.Run(bctx, chromedp.Evaluate[[]turnColors](`Array.from(document.querySelectorAll(".col .segment.turn")).map(s => {
	  const toks = Array.from(s.querySelectorAll(".text")[0].querySelectorAll(".tok:not(.off)"));
	  const sel = s.querySelector(".chip.sel");
	  return {Turn: +s.dataset.turn, BG: toks.filter(e => !e.classList.contains("nov")).map(e => getComputedStyle(e).backgroundColor),
	    V: toks.filter(e => !e.classList.contains("nov")).map(e => e.dataset.v), NoVal: toks.filter(e => e.classList.contains("nov")).length,
	    Chip: sel ? getComputedStyle(sel).backgroundColor : "", Sel: sel ? sel.dataset.key : ""};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkColorBy opens, from a URL that asks for z̃, a sample of the live topic
// whose informative turn the demo's world knows, switches "color by" to Δ
// and checks that the informative turn is drawn at the scale's full blue
// and every other turn clearly apart from it; every token shows its turn's
// Δ and the choice is kept in the URL. It saves a screenshot
// (docs/img/monitor-sample-delta.png with CREDITFLOW_UPDATE_SCREENSHOT=1) and runs
// the screenshot recipe of docs/monitor.md with Chromium's command line.
func checkColorBy(t *testing.T, bctx context.Context, exe, base, live string, seed uint64, groupSize int) {
	v, inf := informativeSample(t, base, live, "q000018-2", seed, groupSize)
	id := v.TrajectoryID
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"#"+url.Values{"view": {"sample"}, "id": {id}, "topic": {live}, "color": {"z_norm"}}.Encode())); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(() => { const s = window.cfMonitor.samples; return s.views.length === 1 && s.views[0].trajectory_id === `+strconv.Quote(id)+
		` && s.color.mode === "z_norm" && document.getElementById("v-color").value === "z_norm"; })()`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("#…&color=z_norm did not open %s colored by z̃: %v", id, err)
	}
	byZ := readTurnColors(t, bctx)
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("v-color"); s.value = "delta"; s.dispatchEvent(new Event("change")); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.cfMonitor.samples.color.mode === "delta" && location.hash.includes("color=delta")`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("selecting Δ: %v", err)
	}
	byD := readTurnColors(t, bctx)
	if len(byD) != len(v.Turns) {
		t.Fatalf("%d turns drawn, %s has %d", len(byD), id, len(v.Turns))
	}
	full := [3]float64{33, 102, 172}
	color := func(tc turnColors) [3]float64 {
		if len(tc.BG) == 0 {
			t.Fatalf("turn %d of %s: no colored policy token", tc.Turn, id)
		}
		for _, bg := range tc.BG {
			if bg != tc.BG[0] {
				t.Fatalf("turn %d: tokens drawn %s and %s, want one color per turn", tc.Turn, tc.BG[0], bg)
			}
		}
		return rgbOf(t, tc.BG[0])
	}
	if got := color(byD[inf]); got != full {
		t.Fatalf("%s: the informative turn %d (Δ %v) drawn %v, want the full blue %v", id, inf, *v.Turns[inf].Delta, got, full)
	}
	if byD[inf].Sel != "delta" || rgbOf(t, byD[inf].Chip) != full {
		t.Errorf("the informative turn's Δ chip: %q on %s", byD[inf].Sel, byD[inf].Chip)
	}
	minD, minZ := math.Inf(1), math.Inf(1)
	for k, tc := range byD {
		tr := v.Turns[k]
		if tr.Delta == nil {
			if len(tc.BG) != 0 || tc.NoVal == 0 {
				t.Errorf("turn %d has no Δ but %d tokens are colored (%d shown without a value)", k, len(tc.BG), tc.NoVal)
			}
			continue
		}
		for _, s := range tc.V {
			if f, err := strconv.ParseFloat(s, 64); err != nil || f != *tr.Delta {
				t.Fatalf("turn %d token shows %q, its Δ is %v", k, s, *tr.Delta)
			}
		}
		if k == inf {
			continue
		}
		d := rgbDist(color(tc), full)
		if d < 100 {
			t.Errorf("turn %d (Δ %v) drawn %v, only %.0f from the informative turn's color", k, *tr.Delta, color(tc), d)
		}
		minD = math.Min(minD, d)
		if len(byZ[k].BG) > 0 && len(byZ[inf].BG) > 0 {
			minZ = math.Min(minZ, rgbDist(color(byZ[k]), color(byZ[inf])))
		}
	}
	scaleMax, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#v-legend [data-key="scale-max"]').textContent`))
	if err != nil || scaleMax != fmt.Sprintf("+%.3g", *v.Turns[inf].Delta) {
		t.Errorf("legend ends at %q, want +%.3g (%v)", scaleMax, *v.Turns[inf].Delta, err)
	}
	t.Logf("%s: informative turn %d; nearest other turn %.0f from it in color by Δ, %.0f by z̃", id, inf, minD, minZ)

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "monitor-sample-delta.png")
	if os.Getenv("CREDITFLOW_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "docs", "img", "monitor-sample-delta.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	checkScreenshotRecipe(t, exe, base, id, full)
}

// checkScreenshotRecipe runs every `chromium --headless …` line of
// docs/monitor.md as written (as root too: the recipe carries --no-sandbox),
// with the monitor's address, the sample's id and a temporary file put in:
// each writes its PNG within its time budget, and the sample view's shows
// the informative turn in the full blue of color by Δ.
func checkScreenshotRecipe(t *testing.T, exe, base, id string, full [3]float64) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "monitor.md"))
	if err != nil {
		t.Fatal(err)
	}
	urlRe := regexp.MustCompile(`'http://127\.0\.0\.1:8090/([^']*)'`)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "chromium --headless ") {
			continue
		}
		m := urlRe.FindStringSubmatch(line)
		if m == nil || !strings.Contains(line, " --no-sandbox ") {
			t.Fatalf("docs/monitor.md recipe %q: want --no-sandbox and a quoted http://127.0.0.1:8090/ URL", line)
		}
		target := base + regexp.MustCompile(`id=[^&]*`).ReplaceAllString(m[1], "id="+url.QueryEscape(id))
		file := filepath.Join(t.TempDir(), fmt.Sprintf("recipe-%d.png", n))
		var args []string
		for _, f := range strings.Fields(strings.Replace(line, m[0], "", 1))[1:] {
			if strings.HasPrefix(f, "--screenshot=") {
				f = "--screenshot=" + file
			}
			args = append(args, f)
		}
		args = append(args, target)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		outb, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
		cancel()
		f, ferr := os.Open(file)
		if err != nil || ferr != nil {
			t.Fatalf("recipe %q: %v %v\n%s", line, err, ferr, outb)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("recipe %q: %v", line, err)
		}
		if strings.Contains(m[1], "color=delta") {
			blue := 0
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					r, g, bl, _ := img.At(x, y).RGBA()
					if [3]float64{float64(r >> 8), float64(g >> 8), float64(bl >> 8)} == full {
						blue++
					}
				}
			}
			if blue < 500 {
				t.Errorf("recipe %q: %d pixels of the informative turn's blue in the screenshot of %s", line, blue, id)
			}
		}
		n++
	}
	if n < 3 {
		t.Fatalf("docs/monitor.md has %d chromium recipe lines, want the overview, the samples list and a sample", n)
	}
}
