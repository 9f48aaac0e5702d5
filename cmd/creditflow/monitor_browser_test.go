package main

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/monitor"
	"github.com/creditflow/creditflow/processors/stage"
)

// chromium returns a Chromium/Chrome binary, or "" when none is installed.
func chromium() string {
	if p := os.Getenv("CREDITFLOW_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// TestMonitorPageInBrowser serves the monitor over a demo run and a replay of
// it with another λ (two samples topics), loads the page in headless
// Chromium, waits until every chart that the run feeds holds data, checks
// that the numbers the page shows equal GET /api/v1/summary and takes a
// screenshot (written to docs/img/monitor.png when
// CREDITFLOW_UPDATE_SCREENSHOT=1, to a temporary folder otherwise).
func TestMonitorPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline and a browser")
	}
	exe := chromium()
	if exe == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium binary (.ci/run installs it: apt-get install chromium)")
		}
		t.Skip("no chromium binary (apt-get install chromium, or set CREDITFLOW_CHROMIUM)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := brokertest.Start(t, broker.WithDefaultPartitions(4))
	topics := stage.DefaultTopics()
	replayTopic := topics.Samples + ".lambda-0"

	m, err := monitor.New(monitor.Source{Brokers: b.Addrs(), Topics: []string{topics.Samples, replayTopic},
		DeadLetters: topics.DeadLetters, Policy: topics.Policy, Scored: topics.Scored, From: "earliest"}, monitor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.Serve(ctx, ln) }()
	go func() { _ = m.Follow(ctx) }()
	url := "http://" + ln.Addr().String() + "/"

	// The browser opens the page before any sample exists: it must fill in live.
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1500, 1000))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible("#kpis")); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}

	o := demo.Defaults()
	o.Brokers = b.Addrs()
	sum, err := demo.Run(ctx, o)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if err := runReplay([]string{"--brokers", strings.Join(b.Addrs(), ","), "--topic-samples", replayTopic,
		"--lambda", "0", "--group", "monitor-test-replay", "--log-level", "error"}); err != nil {
		t.Fatalf("replay: %v", err)
	}

	want := strconv.Itoa(sum.SamplesOut)
	wantDead := strconv.Itoa(sum.DeadLetters)
	fed := []string{"c-reward-version", "c-success-version", "c-reward-time", "c-success-time", "c-reward-hist", "c-adv-hist",
		"c-zero-version", "c-pass-version", "c-outadv-hist", "c-tokens-hist", "c-turns-hist", "c-rate",
		"c-delta-version", "c-gate-version", "c-aproc-version", "c-age-hist", "c-lag-hist", "c-scorerlag-hist"}
	fedJSON, _ := json.Marshal(fed)
	cond := `(() => {
	  const q = (t, k) => { const e = document.querySelector('td[data-topic="' + t + '"][data-key="' + k + '"]'); return e ? e.textContent : ""; };
	  const s = window.cfMonitor;
	  return q("` + topics.Samples + `", "samples") === "` + want + `" && q("` + replayTopic + `", "samples") === "` + want + `" &&
	    q("` + topics.Samples + `", "open_groups") === "0" && q("` + replayTopic + `", "open_groups") === "0" &&
	    (document.querySelector('td[data-key="dead_letters_total"]') || {}).textContent === "` + wantDead + `" &&
	    ` + string(fedJSON) + `.every(id => s.points[id] > 0);
	})()`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		points, _ := chromedp.Run(bctx, chromedp.Evaluate[map[string]int](`window.cfMonitor.points`))
		t.Fatalf("the page never showed %s samples per topic with every chart fed: %v (points %v)", want, err, points)
	}

	// The numbers on the page against the API, read after the page's.
	type cell struct{ Topic, Key, Reason, Source, Text string }
	cells, err := chromedp.Run(bctx, chromedp.Evaluate[[]cell](`Array.from(document.querySelectorAll("td.num")).map(e =>
	  ({Topic: e.dataset.topic || "", Key: e.dataset.key || "", Reason: e.dataset.reason || "", Source: e.dataset.source || "", Text: e.textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "api/v1/summary")
	if err != nil {
		t.Fatal(err)
	}
	var api map[string]any
	err = json.NewDecoder(resp.Body).Decode(&api)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cells {
		var v any
		switch {
		case c.Reason != "":
			v = api["dead_letters"].(map[string]any)[c.Reason]
		case c.Key == "dead_letters_total":
			v = api["dead_letters_total"]
		case c.Key == "samples_per_second":
			continue // a function of wall time, not in the summary
		case c.Source != "":
			obj := api
			if c.Topic != "*" {
				obj = api["topics"].(map[string]any)[c.Topic].(map[string]any)
			}
			for _, r := range obj["by_source"].([]any) {
				if r := r.(map[string]any); r["source"] == c.Source {
					v = r[c.Key]
				}
			}
		case c.Topic == "*":
			v = api[c.Key]
		default:
			v = api["topics"].(map[string]any)[c.Topic].(map[string]any)[c.Key]
		}
		if !sameNumber(c.Text, v) {
			t.Errorf("page shows %q for %s/%s%s, /api/v1/summary says %v", c.Text, c.Topic, c.Key, c.Reason, v)
		}
		checked++
	}
	if checked < 3*15+2*6+2 {
		t.Fatalf("checked only %d numbers on the page", checked)
	}
	if got := api["samples"].(float64); got != float64(2*sum.SamplesOut) {
		t.Fatalf("summary: %v samples over both topics, want %d", got, 2*sum.SamplesOut)
	}
	// The demo's scorers serve the newest policy version the rollouts use: the
	// scorer version lag is known and never negative (a scorer that reported
	// version 0 for weights it was never told about made it −0.33).
	if n, lag := api["scorer_lag_samples"].(float64), api["scorer_lag_mean"].(float64); n != float64(2*sum.SamplesOut) || lag < 0 {
		t.Fatalf("summary: scorer version lag over %v samples, mean %v; want every sample, mean ≥ 0", n, lag)
	}

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	defer checkColorBy(t, bctx, exe, url, topics.Samples, o.Seed, o.GroupSize) // then color by Δ and the screenshot recipe
	defer checkSampleViews(t, bctx, url, topics.Samples, replayTopic)          // the samples and sample views
	out := filepath.Join(t.TempDir(), "monitor.png")
	if os.Getenv("CREDITFLOW_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join("..", "..", "docs", "img", "monitor.png")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes); checked %d numbers", out, len(png), checked)
}

// sameNumber reports whether text (as the page formats it: an integer, a
// fixed-point number or a percentage) shows the number v, within half a unit
// of its last digit.
func sameNumber(text string, v any) bool {
	if v == nil {
		return text == "–"
	}
	f, ok := v.(float64)
	if !ok {
		return false
	}
	scale := 1.0
	if strings.HasSuffix(text, "%") {
		text, scale = strings.TrimSuffix(text, "%"), 100
	}
	got, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return false
	}
	digits := 0
	if i := strings.IndexByte(text, '.'); i >= 0 {
		digits = len(text) - i - 1
	}
	return math.Abs(got-f*scale) <= 0.5*math.Pow(10, -float64(digits))+1e-9
}
