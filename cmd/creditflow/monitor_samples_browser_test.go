package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/creditflow/creditflow/monitor"
)

// getJSON decodes GET u into v.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// checkSampleViews drives the samples view and the side-by-side sample
// view of the page at base (a monitor over topics live and replay, a
// replay of live with other settings) and checks what the page shows
// against GET /api/v1/samples and /api/v1/samples/{id}: the list's cells,
// every fact and per-turn diagnostic, every token's text, value and
// off-policy mark, the colors' signs and the differences marked between the
// two topics. It saves a screenshot of the sample view (docs/img/sample-view.png
// with CREDITFLOW_UPDATE_SCREENSHOT=1).
func checkSampleViews(t *testing.T, bctx context.Context, base, live, replay string) {
	// The samples view: the worst by process credit in the live topic.
	setSel := func(id, v string) error {
		_, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return s.value === %q; })()`, id, v, v)))
		return err
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"#view=samples"), chromedp.WaitVisible("#s-table")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelectorAll("#s-topic option").length >= 3`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the samples view never listed the topics: %v", err)
	}
	for _, kv := range [][2]string{{"s-order", "worst"}, {"s-by", "process"}, {"s-topic", live}} {
		if err := setSel(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	wantURL := "api/v1/samples?order=worst&by=process&limit=20&topic=" + url.QueryEscape(live)
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.cfMonitor.samples.listURL === `+strconv.Quote(wantURL), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the samples view never loaded %s: %v", wantURL, err)
	}
	type row struct {
		ID    string
		Cells map[string]string
	}
	// The page's list and the test's GET of the same URL are two reads of a monitor that may
	// still be reading the topic: when their ids differ, the page is asked again (the same
	// selection) until both reads agree, for at most 20 s.
	var rows []row
	var refs []map[string]any
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		rows, err = chromedp.Run(bctx, chromedp.Evaluate[[]row](`Array.from(document.querySelectorAll("#s-table tbody tr")).map(tr => ({ID: tr.querySelector("a") ? tr.querySelector("a").textContent : "",
	  Cells: Object.fromEntries(Array.from(tr.querySelectorAll("td[data-key]")).map(td => [td.dataset.key, td.textContent]))}))`))
		if err != nil {
			t.Fatal(err)
		}
		refs = nil
		getJSON(t, base+wantURL, &refs)
		same := len(rows) == len(refs)
		for i := 0; same && i < len(refs); i++ {
			same = rows[i].ID == refs[i]["trajectory_id"]
		}
		if same || time.Now().After(deadline) {
			break
		}
		if err := setSel("s-order", "worst"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(refs) == 0 || len(rows) != len(refs) {
		t.Fatalf("samples view: %d rows, the API %d", len(rows), len(refs))
	}
	checked := 0
	for i, r := range refs {
		if rows[i].ID != r["trajectory_id"] {
			t.Fatalf("row %d: %s, API %v", i, rows[i].ID, r["trajectory_id"])
		}
		for k, text := range rows[i].Cells {
			switch v := r[k].(type) {
			case string:
				if text != v {
					t.Errorf("row %d %s: page %q, API %q", i, k, text, v)
				}
			default:
				if !sameNumber(text, v) {
					t.Errorf("row %d %s: page %q, API %v", i, k, text, v)
				}
			}
			checked++
		}
	}
	for i := 1; i < len(refs); i++ {
		if refs[i-1]["process"].(float64) > refs[i]["process"].(float64) {
			t.Fatalf("worst by process not in order: %v then %v", refs[i-1]["process"], refs[i]["process"])
		}
	}

	// The sample view, live beside replay, of the first listed sample whose
	// tokens were pushed both up and down (else the first).
	id := refs[0]["trajectory_id"].(string)
	for _, r := range refs {
		var v monitor.SampleView
		getJSON(t, base+"api/v1/samples/"+url.PathEscape(r["trajectory_id"].(string))+"?topic="+url.QueryEscape(live), &v)
		up, down := false, false
		for _, a := range v.Advantages {
			up, down = up || a > 0, down || a < 0
		}
		if up && down {
			id = v.TrajectoryID
			break
		}
	}
	if err := chromedp.Do(bctx, chromedp.Click(`#s-table tbody a[href*="id=`+url.QueryEscape(id)+`&"]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.cfMonitor.samples.views.length === 1 && window.cfMonitor.samples.views[0].trajectory_id === `+strconv.Quote(id), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("clicking %s did not open its sample view: %v", id, err)
	}
	if err := setSel("v-compare", replay); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.cfMonitor.samples.views.length === 2 && document.querySelectorAll(".col").length === 2`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("side by side never drawn: %v", err)
	}
	type tok struct {
		I    int
		Text string
		Off  bool
		V    string
		Diff bool
		BG   string
	}
	type col struct {
		Topic string
		Facts map[string]string
		Diag  []struct{ Turn, Key, Text string }
		Toks  []tok
	}
	cols, err := chromedp.Run(bctx, chromedp.Evaluate[[]col](`Array.from(document.querySelectorAll(".col")).map(c => ({Topic: c.dataset.topic,
	  Facts: Object.fromEntries(Array.from(c.querySelectorAll("table.facts td[data-key]")).map(td => [td.dataset.key, td.textContent])),
	  Diag: Array.from(c.querySelectorAll(".chip[data-turn]")).map(e => ({Turn: e.dataset.turn, Key: e.dataset.key, Text: e.querySelector("b").textContent})),
	  Toks: Array.from(c.querySelectorAll(".tok[data-i]")).map(e => ({I: +e.dataset.i, Text: e.textContent, Off: e.classList.contains("off"),
	    V: e.dataset.v || "", Diff: e.classList.contains("tdiff"), BG: getComputedStyle(e).backgroundColor}))}))`))
	if err != nil {
		t.Fatal(err)
	}
	var views [2]monitor.SampleView
	for k, topic := range []string{live, replay} {
		getJSON(t, base+"api/v1/samples/"+url.PathEscape(id)+"?topic="+url.QueryEscape(topic), &views[k])
	}
	if len(cols) != 2 || cols[0].Topic != live || cols[1].Topic != replay {
		t.Fatalf("columns %v", cols)
	}
	withs := 0
	for _, tr := range views[0].Turns {
		if tr.With != nil && tr.Without != nil {
			withs++
		}
	}
	if withs == 0 {
		t.Errorf("no turn of %s carries S with/without from the scored topic", id)
	}
	diffs := 0
	for i := range views[0].Tokens {
		if views[0].LossMask[i] == 1 && views[0].Advantages[i] != views[1].Advantages[i] {
			diffs++
		}
	}
	for k, c := range cols {
		v := &views[k]
		for key, want := range map[string]float64{"reward": v.Reward, "outcome_advantage": v.OutcomeAdvantage} {
			if !sameNumber(c.Facts[key], want) {
				t.Errorf("%s %s: page %q, API %v", c.Topic, key, c.Facts[key], want)
			}
			checked++
		}
		if want := fmt.Sprintf("%s · member %d of %d", v.PromptID, v.SampleIndex, v.GroupSize); !strings.HasPrefix(c.Facts["group"], want) {
			t.Errorf("%s group: page %q, want %q", c.Topic, c.Facts["group"], want)
		}
		turns := map[string]map[string]any{}
		b, _ := json.Marshal(v.Turns)
		var raw []map[string]any
		_ = json.Unmarshal(b, &raw)
		for i, r := range raw {
			turns[strconv.Itoa(i)] = r
		}
		for _, d := range c.Diag {
			if !sameNumber(d.Text, turns[d.Turn][d.Key]) {
				t.Errorf("%s turn %s %s: page %q, API %v", c.Topic, d.Turn, d.Key, d.Text, turns[d.Turn][d.Key])
			}
			checked++
		}
		if len(c.Diag) < 8*len(v.Turns) {
			t.Errorf("%s: %d diagnostics shown for %d turns", c.Topic, len(c.Diag), len(v.Turns))
		}
		if len(c.Toks) != len(v.Tokens) {
			t.Fatalf("%s: %d tokens shown, the sample has %d", c.Topic, len(c.Toks), len(v.Tokens))
		}
		var text strings.Builder
		pos, neg, marked := 0, 0, 0
		for _, tk := range c.Toks {
			text.WriteString(tk.Text)
			if tk.Off != (v.LossMask[tk.I] == 0) {
				t.Fatalf("%s token %d: off-policy mark %v, loss_mask %d", c.Topic, tk.I, tk.Off, v.LossMask[tk.I])
			}
			if tk.Diff {
				marked++
			}
			if tk.Off {
				continue
			}
			f, err := strconv.ParseFloat(tk.V, 64)
			if err != nil || float32(f) != v.Advantages[tk.I] { // JSON carries float32s in their shortest form
				t.Fatalf("%s token %d: page value %q, API advantage %v", c.Topic, tk.I, tk.V, v.Advantages[tk.I])
			}
			var r, g, bl int
			fmt.Sscanf(tk.BG, "rgb(%d, %d, %d)", &r, &g, &bl)
			switch {
			case f > 0 && bl > r:
				pos++
			case f < 0 && r > bl:
				neg++
			case f != 0:
				t.Fatalf("%s token %d: value %v drawn on %s", c.Topic, tk.I, f, tk.BG)
			}
			checked++
		}
		if text.String() != strings.Join(v.Text, "") {
			t.Fatalf("%s: page text %q, API text %q", c.Topic, text.String(), strings.Join(v.Text, ""))
		}
		if marked != diffs {
			t.Errorf("%s: %d tokens marked as differing, the API's advantages differ on %d", c.Topic, marked, diffs)
		}
		if pos+neg == 0 {
			t.Errorf("%s: no colored policy token", c.Topic)
		}
	}
	if diffs == 0 {
		t.Errorf("the replay with λ = 0 changed no advantage of %s", id)
	}
	n, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("v-diff").dataset.n`))
	if err != nil || n != strconv.Itoa(diffs) {
		t.Errorf("difference summary says %q tokens, want %d (%v)", n, diffs, err)
	}

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sample-view.png")
	if os.Getenv("CREDITFLOW_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "docs", "img", "sample-view.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	// An id no topic holds: the view says so.
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"#view=sample&id=no-such-trajectory")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`(() => { const e = document.getElementById("v-error"); return !e.hidden && e.textContent.includes("no such sample"); })()`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("an unknown trajectory_id shows no error: %v", err)
	}
	t.Logf("sample view of %s: %d tokens differ between %s and %s; checked %d numbers; screenshot %s", id, diffs, live, replay, checked, out)
}
