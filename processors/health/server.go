package health

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Serve serves /metrics (and /healthz, and the extra routes) of reg
// on addr. It listens before it returns, so an address already in use is an
// error at start-up rather than a process that runs without metrics. The
// returned function stops the server.
func Serve(addr string, reg *prometheus.Registry, log zerolog.Logger, extra ...map[string]http.HandlerFunc) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick a free port, or an empty --metrics-addr to switch metrics off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	for _, routes := range extra {
		for path, h := range routes {
			mux.HandleFunc(path, h)
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", addr).Msg("metrics server stopped")
		}
	}()
	return func() { _ = srv.Close() }, nil
}
