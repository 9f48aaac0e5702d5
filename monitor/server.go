package monitor

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed web
var webFS embed.FS

// Handler serves the page (every asset embedded), GET /api/v1/summary,
// GET /api/v1/view (summary and chart data), GET /api/v1/events (the view as
// server-sent events, pushed at most every 250 ms while it changes),
// GET /api/v1/samples (kept samples: recent, best, worst), GET
// /api/v1/samples/{trajectory_id} (one sample read again, laid out) and
// /metrics.
func (m *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/v1/summary", func(w http.ResponseWriter, r *http.Request) {
		m.agg.Sweep()
		writeJSON(w, m.agg.Summary())
	})
	mux.HandleFunc("GET /api/v1/view", func(w http.ResponseWriter, r *http.Request) {
		m.agg.Sweep()
		writeJSON(w, m.view())
	})
	mux.HandleFunc("GET /api/v1/events", m.events)
	mux.HandleFunc("GET /api/v1/samples", m.handleSamples)
	mux.HandleFunc("GET /api/v1/samples/{id...}", m.handleSample)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

func (m *Monitor) view() View {
	v := m.agg.View()
	v.Reading = &Reading{Topics: m.src.Topics, DeadLetters: m.src.DeadLetters, Policy: m.src.Policy, From: m.src.From, GroupIdle: m.cfg.GroupIdle.String()}
	if v.Reading.From == "" {
		v.Reading.From = "earliest"
	}
	return v
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// events streams the view whenever it changed, checking every 250 ms, and
// at least every 5 s (the samples/s chart moves with the clock).
func (m *Monitor) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last uint64
	var sent time.Time
	first := true
	for {
		m.agg.Sweep()
		if c := m.agg.Changes(); first || c != last || time.Since(sent) > 5*time.Second {
			b, err := json.Marshal(m.view())
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
			last, sent, first = c, time.Now(), false
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func newRegistry(agg *Aggregator) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(agg))
	return reg
}
