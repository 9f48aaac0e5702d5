package learn

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

func run3(method string, seed int, successes ...float64) Summary {
	s := Summary{Method: method, World: "searchqa", Seed: seed}
	for i, x := range successes {
		s.Eval = append(s.Eval, Eval{PolicyVersion: int64(i), TrainerStep: i, Trajectories: 40 * i, SuccessRate: x})
	}
	s.InitialSuccess, s.FinalSuccess = successes[0], successes[len(successes)-1]
	return s
}

func TestComparisonTableAndPicture(t *testing.T) {
	c := Comparison{Runs: []Summary{
		run3("lapo", 1, 0.4, 0.6, 0.9), run3("lapo", 2, 0.5, 0.7, 0.7),
		run3("grpo", 1, 0.4, 0.5, 0.6), run3("grpo", 2, 0.5, 0.5, 0.5),
	}}
	md := c.Markdown()
	// lapo: finals 0.9, 0.7 -> mean 0.8, sd 0.1414; gains 0.5, 0.2 -> 0.35 ± 0.2121
	for _, want := range []string{"| lapo | searchqa | 2 | 0.800 ± 0.141 | +0.350 ± 0.212 |", "| grpo | searchqa | 2 | 0.550 ± 0.071 | +0.100 ± 0.141 |",
		"| lapo | searchqa | 1 | 0.400 | 0.900 | +0.500 | 0.633 | 2 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	pts := c.curve("lapo/searchqa", false)
	if len(pts) != 3 || math.Abs(pts[1].mean-0.65) > 1e-12 || pts[1].lo != 0.6 || pts[1].hi != 0.7 {
		t.Errorf("lapo curve %+v", pts)
	}
	if tr := c.curve("grpo/searchqa", true); tr[2].x != 80 {
		t.Errorf("by trajectories: x = %v, want 80", tr[2].x)
	}
	svg := c.SVG("a & b")
	d := xml.NewDecoder(strings.NewReader(svg))
	lines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("picture is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 { // two methods × two panels
		t.Errorf("%d curves, want 4", lines)
	}
}

func TestBoundNamesTheBusiestPart(t *testing.T) {
	if b := bound(map[string]float64{"waiting": 0.2}, 2); !strings.HasPrefix(b, "training") {
		t.Errorf("trainer rarely waits: %q", b)
	}
	if b := bound(map[string]float64{"waiting": 0.8, "sampling": 1.6, "scoring": 0.3}, 2); !strings.HasPrefix(b, "sampling") {
		t.Errorf("workers busy: %q", b)
	}
	if b := bound(map[string]float64{"waiting": 0.8, "sampling": 0.4, "scoring": 0.9}, 2); !strings.HasPrefix(b, "scoring") {
		t.Errorf("processor busy: %q", b)
	}
	// The trainer rarely waits, but the evaluator is busier than the
	// trainer: the largest share is named, not training.
	sh := map[string]float64{"waiting": 0.12, "training": 0.43, "evaluation": 0.93, "scoring": 0.3, "sampling": 0.5}
	if b := bound(sh, 2); !strings.HasPrefix(b, "evaluation (93%") {
		t.Errorf("evaluation busiest: %q", b)
	}
	if b := bound(map[string]float64{"waiting": 0.3, "training": 0.65, "evaluation": 0.2}, 2); !strings.HasPrefix(b, "training (65%") {
		t.Errorf("training busiest: %q", b)
	}
}

// TestLegendRowsDoNotOverlap: short arm names share a legend row two by two; a name whose label
// would run into its neighbour's puts every arm on a row of its own, inside the picture.
func TestLegendRowsDoNotOverlap(t *testing.T) {
	legendRows := func(c Comparison) (map[string]bool, int) {
		svg := c.SVG("t")
		rows := map[string]bool{}
		for _, line := range strings.Split(svg, "\n") {
			if strings.Contains(line, "band: min–max") {
				i := strings.Index(line, `<text x="`)
				y := strings.Fields(line[i:])[2] // y="…">label
				rows[y[:strings.Index(y, ">")]] = true
			}
		}
		var h int
		if _, err := fmt.Sscanf(svg[strings.Index(svg, `height="`):], `height="%d"`, &h); err != nil {
			t.Fatal(err)
		}
		return rows, h
	}
	short := Comparison{Runs: []Summary{run3("lapo", 1, 0.4, 0.5), run3("grpo", 1, 0.4, 0.5), run3("ppo", 1, 0.4, 0.5)}}
	if rows, _ := legendRows(short); len(rows) != 2 {
		t.Errorf("three short arms on %d legend rows, want 2", len(rows))
	}
	long := Comparison{Runs: []Summary{run3("lapo", 1, 0.4, 0.5), run3("grpo", 1, 0.4, 0.5), run3("ppo", 1, 0.4, 0.5)}}
	long.Runs[0].Method = "attnsr+uniform+terminal"
	rows, h := legendRows(long)
	if len(rows) != 3 {
		t.Errorf("three arms, one with a long name, on %d legend rows, want 3", len(rows))
	}
	if last := 50 + 280 + 50 + 16*2; h < last+8 {
		t.Errorf("picture %d px high, its last legend row at %d", h, last)
	}
}
