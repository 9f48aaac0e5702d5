package monitor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHandler serves a monitor whose aggregator was fed directly and checks
// the summary, /metrics, the first server-sent event and the embedded page.
func TestHandler(t *testing.T) {
	m, err := New(Source{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"live"}, DeadLetters: "dead"}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		m.agg.Add("live", sample(fmt.Sprint(i), fmt.Sprint("p", i/3), 3, 1, float64(i%3)/2), time.Time{})
	}
	m.agg.AddDeadLetter(nil, "late")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var s Summary
	if err := json.Unmarshal([]byte(get("/api/v1/summary")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Samples != 6 || s.Groups != 2 || !near(s.RewardMean, 0.5) || s.DeadLetters["late"] != 1 || s.Topics["live"].Samples != 6 {
		t.Fatalf("summary %+v", s)
	}
	metrics := get("/metrics")
	for _, want := range []string{`creditflow_monitor_samples_total{topic="live"} 6`, `creditflow_monitor_groups_total{topic="live"} 2`,
		`creditflow_monitor_successes_total{topic="live"} 2`, `creditflow_monitor_reward_mean{topic="live"} 0.5`,
		`creditflow_monitor_dead_letters_total{reason="late"} 1`, `creditflow_monitor_newest_policy_version{topic="live"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	page := get("/")
	for _, want := range []string{"vendor/uPlot.iife.min.js", "app.js", `id="kpis"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if js := get("/vendor/uPlot.iife.min.js"); !strings.Contains(js, "uPlot") {
		t.Error("uPlot is not served")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	var ev View
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if ev.Summary.Samples != 6 || len(ev.Charts) != 1 || ev.Reading == nil || ev.Reading.From != "earliest" || ev.Charts[0].Reward.Counts[19] != 2 {
		t.Fatalf("first event: %+v", ev)
	}
}
