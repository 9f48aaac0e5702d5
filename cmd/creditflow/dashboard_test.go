package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/broker/brokertest"
	"github.com/creditflow/creditflow/vocab"
)

// repoRoot is the repository root (this package is cmd/creditflow).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var metricName = regexp.MustCompile(`creditflow_[a-z0-9_]*[a-z0-9]`)

// dashboardSeries returns every creditflow_ series named anywhere in the
// Grafana dashboard (queries, template variables).
func dashboardSeries(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "helm/creditflow/files/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	out := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			for _, m := range metricName.FindAllString(x, -1) {
				out[m] = true
			}
		}
	}
	walk(v)
	return out
}

// docMetrics returns every creditflow_ name in the Markdown files of the
// repository, with the file that names it, leaving out names that are a
// Python module of the repository (creditflow_wire).
func docMetrics(t *testing.T) map[string]string {
	t.Helper()
	modules := map[string]bool{}
	out := map[string]string{}
	walkRepo(t, func(rel string) bool {
		if strings.HasSuffix(rel, ".py") {
			modules[strings.TrimSuffix(filepath.Base(rel), ".py")] = true
		}
		return strings.HasSuffix(rel, ".md")
	}, func(rel, text string) {
		for _, loc := range metricName.FindAllStringIndex(text, -1) {
			if end := loc[1]; end < len(text) && (text[end] == '_' || text[end] == '*') {
				continue // a family pattern such as creditflow_lapo_*
			}
			if m := text[loc[0]:loc[1]]; out[m] == "" {
				out[m] = rel
			}
		}
	})
	for m := range out {
		if modules[m] {
			delete(out, m)
		}
	}
	return out
}

// gathered returns the series names reg exports (histograms as their
// _bucket, _sum and _count series).
func gathered(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		n := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[n], out[n+"_sum"], out[n+"_count"] = true, true, true
		default:
			out[n] = true
		}
	}
	return out
}

// scraped returns the series names of a Prometheus text page.
func scraped(body string) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			out[l[:i]] = true
		}
	}
	return out
}

// demoSeries runs the demo of method on its own broker and returns the
// series its registry exports.
func demoSeries(t *testing.T, method vocab.Method, brokers []string) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	o := demo.Defaults()
	o.Method, o.Credit.Method = method, method
	o.Groups, o.Partitions, o.Bad, o.Scorers = 2, 2, 3, 1
	o.Brokers, o.Registerer, o.Timeout = brokers, reg, 2*time.Minute
	// Per-partition series (consumer lag) exist while a partition is
	// owned: collect what the registry exports while the demo runs.
	seen := map[string]bool{}
	o.Progress = func(demo.Progress) {
		for s := range gathered(t, reg) {
			seen[s] = true
		}
	}
	if _, err := demo.Run(context.Background(), o); err != nil {
		t.Fatalf("demo %s: %v", method, err)
	}
	for s := range gathered(t, reg) {
		seen[s] = true
	}
	return seen
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runSeries runs `creditflow run` (LAPO, in-process scorer) over the
// trajectories already in the broker, into its own topics, scrapes its
// /metrics once it has written samples, stops it like SIGTERM does and
// returns the scraped series.
func runSeries(t *testing.T, brokers []string) map[string]bool {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runStages(ctx, []string{"--brokers", strings.Join(brokers, ","), "--group", "dashboard-test",
			"--topic-scored", "t.scored", "--topic-samples", "t.samples", "--topic-dead-letters", "t.dead-letters",
			"--topic-state", "t.state", "--create-topics", "2", "--scorers", "local", "--metrics-addr", addr, "--log-level", "error"})
	}()
	var series map[string]bool
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("run stopped early: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("run exported no samples within 2 minutes; last scrape: %v", keys(series))
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		series = scraped(body)
		if strings.Contains(body, `creditflow_records_out_total{stage="advantage",topic="t.samples"}`) &&
			series["creditflow_consumer_lag_records"] {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	return series
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// podSeries are the names the Python scorer pod defines (it needs torch
// to run, so its source is read instead).
func podSeries(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "scorer/gpupod/cfpod/*.py"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricName.FindAllString(string(b), -1) {
			out[m] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m+s] = true // histograms are declared by their family name
			}
		}
	}
	return out
}

// TestDashboardAndDocsMatchExportedMetrics: every series the Grafana
// dashboard queries is exported by a run or demo of the matching method
// (creditflow_lapo_* by LAPO, creditflow_attnsr_* by AttnSR, the rest by
// both), a process exports no series of the method it does not run, and
// every creditflow_ metric named in the Markdown docs exists. The names
// come from the dashboard and the docs themselves: a new panel or a new
// documented metric is checked without editing this test.
func TestDashboardAndDocsMatchExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline three times")
	}
	b := brokertest.Start(t, broker.WithDefaultPartitions(2))
	lapo := demoSeries(t, "lapo", b.Addrs())
	run := runSeries(t, b.Addrs()) // reads the trajectories the LAPO demo left
	b2 := brokertest.Start(t, broker.WithDefaultPartitions(2))
	attnsr := demoSeries(t, "attnsr", b2.Addrs())
	pod := podSeries(t)

	// The issues this test was written for, named.
	for _, n := range []string{"creditflow_consumer_lag_records", "creditflow_scorer_tokens_forwarded_total", "creditflow_scorer_tokens_row_by_row_total"} {
		if !run[n] {
			t.Errorf("creditflow run (in-process scorer) does not export %s", n)
		}
	}
	for name, set := range map[string]map[string]bool{"LAPO demo": lapo, "LAPO run": run} {
		for s := range set {
			if strings.HasPrefix(s, "creditflow_attnsr_") {
				t.Errorf("%s exports the AttnSR series %s", name, s)
			}
		}
	}
	for s := range attnsr {
		if strings.HasPrefix(s, "creditflow_lapo_") {
			t.Errorf("AttnSR demo exports the LAPO series %s", s)
		}
	}

	dash := dashboardSeries(t)
	if len(dash) < 10 {
		t.Fatalf("found only %d series in the dashboard: is the file still a Grafana dashboard?", len(dash))
	}
	for _, s := range keys(dash) {
		var ok bool
		switch {
		case strings.HasPrefix(s, "creditflow_scorer_pod_"):
			ok = pod[s]
		case strings.HasPrefix(s, "creditflow_lapo_"):
			ok = lapo[s] && run[s]
		case strings.HasPrefix(s, "creditflow_attnsr_"):
			ok = attnsr[s]
		case strings.HasPrefix(s, "creditflow_consumer_group_"):
			// Group lag read from the brokers: `run` (and the monitor)
			// export it; the in-process demos have no consumer group.
			ok = run[s]
		default:
			ok = (lapo[s] || run[s]) && attnsr[s]
		}
		if !ok {
			t.Errorf("the dashboard queries %s, which a run of the matching method does not export (LAPO demo %v, LAPO run %v, AttnSR demo %v, pod source %v)",
				s, lapo[s], run[s], attnsr[s], pod[s])
		}
	}

	// A documented metric exists when a run or demo exported it, or when
	// the non-test source defines it: metrics of other processes (the
	// monitor, the scorer pods) and of rare events (chunked records).
	defined := sourceMetrics(t)
	all := map[string]bool{}
	for _, set := range []map[string]bool{lapo, run, attnsr, pod, defined} {
		for s := range set {
			all[s] = true
		}
	}
	docs := docMetrics(t)
	if len(docs) < 10 {
		t.Fatalf("found only %d metric names in the docs", len(docs))
	}
	names := make([]string, 0, len(docs))
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !all[n] && !all[n+"_count"] {
			t.Errorf("%s names the metric %s, which no run or demo exports and no source defines", docs[n], n)
		}
	}
}

// sourceMetrics returns the creditflow_ names quoted in the repository's
// non-test Go files ("creditflow_…" string literals, and a quoted
// "creditflow_…_" prefix joined with a quoted word of the same file): the
// metrics the code defines, whether or not a test run exports them.
func sourceMetrics(t *testing.T) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"(creditflow_[a-z0-9_]*[a-z0-9])"`)
	prefix := regexp.MustCompile(`"(creditflow_[a-z0-9_]*_)"`)
	word := regexp.MustCompile(`"([a-z][a-z0-9_]*[a-z0-9])"`)
	out := map[string]bool{}
	walkRepo(t, func(rel string) bool {
		return strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
	}, func(_, text string) {
		for _, m := range lit.FindAllStringSubmatch(text, -1) {
			out[m[1]] = true
		}
		// Names built as "creditflow_<thing>_" + "<rest>" in one file.
		for _, pre := range prefix.FindAllStringSubmatch(text, -1) {
			for _, rest := range word.FindAllStringSubmatch(text, -1) {
				out[pre[1]+rest[1]] = true
			}
		}
	})
	return out
}
