package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Server serves a scorer.Scorer over the creditflow.scorer/v1 protocol
// (docs/scorer-protocol.md), with the guarantees of the package.
type Server struct {
	s        scorer.Scorer
	cfg      config
	sem      chan struct{}
	draining atomic.Bool
	live     liveness
	metrics  *serverMetrics
	handler  http.Handler
	// bodies holds binary request and answer bodies for reuse: decoding
	// copies what it keeps, so a request body's bytes are free once it is
	// decoded, and an answer's once it is written.
	bodies sync.Pool
}

// New serves s.
func New(s scorer.Scorer, opts ...Option) *Server {
	cfg := config{
		maxRequestBytes: 64 << 20,
		maxRows:         65536,
		maxTokens:       4 << 20,
		maxConcurrent:   64,
		shutdownTimeout: 30 * time.Second,
		log:             zerolog.Nop(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.registry == nil {
		cfg.registry = prometheus.NewRegistry()
	}
	srv := &Server{
		s:       s,
		cfg:     cfg,
		sem:     make(chan struct{}, cfg.maxConcurrent),
		metrics: newServerMetrics(cfg.registry),
	}
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.PathInfo, srv.handleInfo)
	mux.HandleFunc(protocol.PathScore, srv.handleScore)
	mux.HandleFunc(protocol.PathAttention, srv.handleAttention)
	mux.HandleFunc(protocol.PathHealth, srv.handleHealth)
	mux.HandleFunc(protocol.PathLive, srv.handleLive)
	mux.Handle(protocol.PathMetrics, promhttp.HandlerFor(cfg.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, protocol.ErrorBody{Code: scorer.CodeNotFound,
			Error: fmt.Sprintf("no endpoint %s; the protocol serves %s, %s, %s, %s and %s", r.URL.Path, protocol.PathInfo, protocol.PathScore, protocol.PathAttention, protocol.PathHealth, protocol.PathMetrics)})
	})
	srv.handler = mux
	return srv
}

// Handler returns the protocol's HTTP handler (all paths).
func (s *Server) Handler() http.Handler { return s.handler }

// ListenAndServe listens on addr (host:port) and serves until ctx ends, then
// shuts down gracefully. It returns nil after a graceful shutdown.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("scorer server: listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully (in-flight
// requests finish, within the shutdown timeout). It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		TLSConfig:         s.cfg.tlsConfig,
		ErrorLog:          stdlog.New(s.cfg.log.With().Str("source", "net/http").Logger(), "", 0),
	}
	tlsOn := s.cfg.tlsConfig != nil || s.cfg.certFile != ""
	s.cfg.log.Info().Str("addr", ln.Addr().String()).Bool("tls", tlsOn).
		Bool("auth", s.cfg.token != "").Str("protocol", protocol.Version).Msg("scorer server listening")
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- hs.ServeTLS(ln, s.cfg.certFile, s.cfg.keyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("scorer server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.cfg.log.Info().Msg("scorer server shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
		return fmt.Errorf("scorer server: graceful shutdown did not finish within %v: %w", s.cfg.shutdownTimeout, err)
	}
	<-errc
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(protocol.Header, protocol.Version)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, body protocol.ErrorBody) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="creditflow-scorer"`)
	}
	writeJSON(w, status, body)
}

// statusWriter remembers the status for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.token == "" {
		return true
	}
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := []byte(strings.TrimSpace(h[len(prefix):]))
	return subtle.ConstantTimeCompare(got, []byte(s.cfg.token)) == 1
}

// guard runs the checks shared by the /v1/ endpoints; it writes the error
// and returns false when the request must stop.
func (s *Server) guard(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, protocol.ErrorBody{Code: scorer.CodeMethod,
			Error: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method)})
		return false
	}
	if !s.authorized(r) {
		writeError(w, http.StatusUnauthorized, protocol.ErrorBody{Code: scorer.CodeUnauthorized,
			Error: "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the scorer was started with"})
		return false
	}
	if method == http.MethodPost {
		if v := r.Header.Get(protocol.Header); v != protocol.Version {
			writeError(w, http.StatusBadRequest, protocol.ErrorBody{Code: scorer.CodeVersionMismatch,
				Error: fmt.Sprintf("request header %s is %q; this scorer speaks %q", protocol.Header, v, protocol.Version)})
			return false
		}
	}
	return true
}

func (s *Server) logRequest(r *http.Request, op string, status int, start time.Time, items, tokens int, err string) {
	d := time.Since(start)
	s.metrics.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	s.metrics.duration.WithLabelValues(op).Observe(d.Seconds())
	var ev *zerolog.Event
	switch {
	case status >= 500:
		ev = s.cfg.log.Error()
	case status >= 400:
		ev = s.cfg.log.Warn()
	default:
		ev = s.cfg.log.Debug()
	}
	ev = ev.Str("op", op).Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).
		Dur("duration", d).Int64("bytes", r.ContentLength).Str("remote", r.RemoteAddr)
	if items > 0 {
		ev = ev.Int("items", items).Int("tokens", tokens)
	}
	if err != "" {
		ev = ev.Str("error", err)
	}
	ev.Msg("scorer request")
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, protocol.ErrorBody{Code: scorer.CodeOverloaded, Error: "scorer is shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "protocol": protocol.Version})
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: 200}
	if !s.guard(sw, r, http.MethodGet) {
		s.logRequest(r, "info", sw.status, start, 0, 0, "")
		return
	}
	info, err := s.s.Info(r.Context())
	if err != nil {
		status, body := errorStatus(err)
		writeError(sw, status, body)
		s.logRequest(r, "info", sw.status, start, 0, 0, body.Error)
		return
	}
	info.Protocol = protocol.Version
	// The server's own features, after the scorer's (FeatureStatistics
	// when the scorer computes them), each once.
	features := append([]string(nil), info.Features...)
	for _, f := range []string{protocol.FeatureRowPieces, protocol.FeatureBinary, protocol.FeatureBinaryJobs, protocol.FeatureLowerGraphs} {
		if !slices.Contains(features, f) {
			features = append(features, f)
		}
	}
	info.Features = features
	writeJSON(sw, http.StatusOK, info)
	s.logRequest(r, "info", sw.status, start, 0, 0, "")
}

// errorStatus maps a scorer.Scorer error to the protocol's status and body.
func errorStatus(err error) (int, protocol.ErrorBody) {
	var rej *scorer.RejectedError
	if errors.As(err, &rej) {
		body := protocol.ErrorBody{Code: rej.Code, Error: rej.Message, ID: rej.ID}
		if rej.Item >= 0 {
			it := rej.Item
			body.Item = &it
		}
		if rej.Code == scorer.CodeTooLarge {
			return http.StatusRequestEntityTooLarge, body
		}
		body.Code = scorer.CodeBadRequest
		return http.StatusBadRequest, body
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable, protocol.ErrorBody{Code: scorer.CodeOverloaded, Error: "request ended before scoring finished: " + err.Error()}
	}
	return http.StatusInternalServerError, protocol.ErrorBody{Code: scorer.CodeInternal, Error: err.Error()}
}

// serveWork is the common path of score and attention requests.
// decode reads the request body into the request; run computes the answer,
// JSON unless it is a rawBody.
func (s *Server) serveWork(w http.ResponseWriter, r *http.Request, op string, decode func(io.Reader) error, count func() (items, rows, tokens int), run func(ctx context.Context) (any, error)) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: 200}
	items, tokens := 0, 0
	fail := func(status int, body protocol.ErrorBody) {
		writeError(sw, status, body)
		s.logRequest(r, op, status, start, items, tokens, body.Error)
	}
	if !s.guard(sw, r, http.MethodPost) {
		s.logRequest(r, op, sw.status, start, 0, 0, "")
		return
	}
	if s.draining.Load() {
		fail(http.StatusServiceUnavailable, protocol.ErrorBody{Code: scorer.CodeOverloaded, Error: "scorer is shutting down; send the request to another endpoint"})
		return
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		fail(http.StatusServiceUnavailable, protocol.ErrorBody{Code: scorer.CodeOverloaded,
			Error: fmt.Sprintf("scorer is serving its limit of %d concurrent requests; retry later or on another endpoint", s.cfg.maxConcurrent)})
		return
	}
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()

	body := http.MaxBytesReader(sw, r.Body, s.cfg.maxRequestBytes)
	if err := decode(body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			fail(http.StatusRequestEntityTooLarge, protocol.ErrorBody{Code: scorer.CodeTooLarge,
				Error: fmt.Sprintf("request body exceeds the scorer's limit of %d bytes; send fewer rows per request", s.cfg.maxRequestBytes)})
			return
		}
		if rej := (*scorer.RejectedError)(nil); errors.As(err, &rej) { // over a limit while decoding
			fail(errorStatus(rej))
			return
		}
		fail(http.StatusBadRequest, protocol.ErrorBody{Code: scorer.CodeBadRequest, Error: err.Error()})
		return
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			fail(http.StatusRequestEntityTooLarge, protocol.ErrorBody{Code: scorer.CodeTooLarge,
				Error: fmt.Sprintf("request body exceeds the scorer's limit of %d bytes", s.cfg.maxRequestBytes)})
			return
		}
	}
	var rows int
	items, rows, tokens = count()
	if rows > s.cfg.maxRows {
		fail(http.StatusRequestEntityTooLarge, protocol.ErrorBody{Code: scorer.CodeTooLarge,
			Error: fmt.Sprintf("request holds %d rows/jobs, over the scorer's limit of %d; split it", rows, s.cfg.maxRows)})
		return
	}
	if tokens > s.cfg.maxTokens {
		fail(http.StatusRequestEntityTooLarge, protocol.ErrorBody{Code: scorer.CodeTooLarge,
			Error: fmt.Sprintf("request holds %d tokens, over the scorer's limit of %d; split it", tokens, s.cfg.maxTokens)})
		return
	}
	s.metrics.items.WithLabelValues(op).Add(float64(items))
	s.metrics.tokens.WithLabelValues(op).Add(float64(tokens))
	resp, err := run(r.Context())
	if err != nil {
		status, b := errorStatus(err)
		fail(status, b)
		return
	}
	s.live.succeeded()
	if raw, ok := resp.(rawBody); ok {
		sw.Header().Set("Content-Type", raw.mediaType)
		sw.Header().Set(protocol.Header, protocol.Version)
		sw.Header().Set("Content-Length", strconv.Itoa(len(raw.data))) // the client sizes its buffer from it
		sw.WriteHeader(http.StatusOK)
		_, _ = sw.Write(raw.data)
		if raw.buf != nil {
			s.bodies.Put(raw.buf)
		}
	} else {
		writeJSON(sw, http.StatusOK, resp)
	}
	s.logRequest(r, op, http.StatusOK, start, items, tokens, "")
}

// rawBody is an answer written as is (a binary body); buf, when not nil,
// holds data and goes back to the server's buffers once written.
type rawBody struct {
	mediaType string
	data      []byte
	buf       *[]byte
}

// decodeJSON reads a JSON request body into req.
func decodeJSON(op string, req any) func(io.Reader) error {
	return func(body io.Reader) error {
		if err := json.NewDecoder(body).Decode(req); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return err
			}
			return fmt.Errorf("request body is not valid JSON for %s: %w", op, err)
		}
		return nil
	}
}

// readBody reads a request body whole into a buffer of s.bodies (give it
// back with s.bodies.Put once decoded). A body that states its length
// (within the server's limit, which body enforces) is read into a buffer of
// that size at once rather than one grown as it arrives.
func (s *Server) readBody(body io.Reader, length int64) (*[]byte, error) {
	data, _ := s.bodies.Get().(*[]byte)
	if data == nil {
		data = new([]byte)
	}
	buf := bytes.NewBuffer((*data)[:0])
	if length > 0 && length <= s.cfg.maxRequestBytes {
		buf.Grow(int(length) + bytes.MinRead) // ReadFrom wants MinRead free bytes to see the end
	}
	_, err := buf.ReadFrom(body)
	*data = buf.Bytes()
	return data, err
}

// decodeScoreRequest reads a score request in the form its Content-Type
// names: binary rows (FeatureBinary), refused as soon as it passes the
// server's row or token limit, or JSON.
func (s *Server) decodeScoreRequest(r *http.Request, req *protocol.ScoreRequest) func(io.Reader) error {
	if !protocol.IsMediaType(r.Header.Get("Content-Type"), protocol.MediaTypeRows) {
		return decodeJSON("score", req)
	}
	return func(body io.Reader) error {
		data, err := s.readBody(body, r.ContentLength)
		defer s.bodies.Put(data)
		if err != nil {
			return err
		}
		if *req, err = protocol.DecodeRowsRequest(*data, s.cfg.maxRows, s.cfg.maxTokens); err != nil {
			if rej := (*scorer.RejectedError)(nil); errors.As(err, &rej) {
				return err
			}
			return fmt.Errorf("request body is not a valid %s score request: %w", protocol.MediaTypeRows, err)
		}
		return nil
	}
}

func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) {
	var req protocol.ScoreRequest
	s.serveWork(w, r, "score", s.decodeScoreRequest(r, &req), func() (int, int, int) {
		rows, tokens := 0, 0
		for i := range req.Sets {
			set := &req.Sets[i]
			rows += len(set.Rows)
			for j := range set.Rows {
				tokens += protocol.RowTokens(set, &set.Rows[j])
			}
		}
		return len(req.Sets), rows, tokens
	}, func(ctx context.Context) (any, error) {
		if err := protocol.ResolveSets(&req); err != nil {
			return nil, err
		}
		if err := protocol.ValidateTemperatures(req); err != nil {
			return nil, err
		}
		sets := protocol.SetsFromWire(req)
		if err := scorer.CheckStatistics(sets); err != nil {
			return nil, err
		}
		if err := s.checkStatistics(ctx, req); err != nil {
			return nil, err
		}
		res, usage, err := s.s.ScoreRows(ctx, sets)
		if err != nil {
			return nil, err
		}
		if len(res) != len(sets) {
			return nil, fmt.Errorf("scorer answered %d sets for %d", len(res), len(sets))
		}
		out := protocol.ScoreResponse{Results: protocol.ScoresToWire(res), Usage: protocol.WireUsage{
			TokensForwarded: usage.TokensForwarded, TokensRowByRow: usage.TokensRowByRow, Truncations: usage.Truncations,
		}}
		if len(res) > 0 {
			out.PolicyVersion = res[0].PolicyVersion // one call, one model
		}
		return out, nil
	})
}

// checkStatistics rejects a set that asks for a statistic other than
// logprob when the served scorer does not advertise scorer.FeatureStatistics
// (it would answer log-probabilities).
func (s *Server) checkStatistics(ctx context.Context, req protocol.ScoreRequest) error {
	for i, set := range req.Sets {
		if scorer.IsLogProb(set.Statistic) {
			continue
		}
		info, err := s.s.Info(ctx)
		if err != nil {
			return err
		}
		if !info.HasFeature(scorer.FeatureStatistics) {
			return scorer.Reject(i, set.ID, "set %d asks for the %s statistic, which this scorer does not compute (it answers logprob only)", i, set.Statistic)
		}
		return nil
	}
	return nil
}

// decodeAttentionRequest reads an attention request whole into a recycled
// buffer and decodes it: protocol.DecodeJobsRequest when its Content-Type is
// protocol.MediaTypeJobs, protocol.DecodeAttentionRequest (JSON) otherwise.
func (s *Server) decodeAttentionRequest(r *http.Request, req *protocol.AttentionRequest) func(io.Reader) error {
	return func(body io.Reader) error {
		data, err := s.readBody(body, r.ContentLength)
		defer s.bodies.Put(data)
		if err != nil {
			return err
		}
		if protocol.IsMediaType(r.Header.Get("Content-Type"), protocol.MediaTypeJobs) {
			if *req, err = protocol.DecodeJobsRequest(*data); err != nil {
				return fmt.Errorf("request body is not a valid binary attention request: %w", err)
			}
			return nil
		}
		if err := protocol.DecodeAttentionRequest(*data, req); err != nil {
			return fmt.Errorf("request body is not valid JSON for attention: %w", err)
		}
		return nil
	}
}

// rawAnswer is a binary answer of mediaType written by appendBody into a
// recycled buffer.
func (s *Server) rawAnswer(mediaType string, appendBody func([]byte) ([]byte, error)) (any, error) {
	buf, _ := s.bodies.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	data, err := appendBody((*buf)[:0])
	*buf = data
	if err != nil {
		s.bodies.Put(buf)
		return nil, err
	}
	return rawBody{mediaType: mediaType, data: data, buf: buf}, nil
}

func (s *Server) handleAttention(w http.ResponseWriter, r *http.Request) {
	var req protocol.AttentionRequest
	lowerAnswer := protocol.Accepts(r.Header.Get("Accept"), protocol.MediaTypeLowerGraphs)
	binaryAnswer := protocol.Accepts(r.Header.Get("Accept"), protocol.MediaTypeGraphs)
	s.serveWork(w, r, "attention", s.decodeAttentionRequest(r, &req), func() (int, int, int) {
		tokens := 0
		for _, j := range req.Jobs {
			tokens += len(j.Tokens)
		}
		return len(req.Jobs), len(req.Jobs), tokens
	}, func(ctx context.Context) (any, error) {
		jobs := protocol.JobsFromWire(req)
		ans, err := s.s.Attention(ctx, jobs, scorer.AttentionOptions{})
		if err != nil {
			return nil, err
		}
		res := ans.Graphs
		var version *int64 // absent from the answer when the scorer does not know it
		if ans.PolicyVersion >= 0 {
			version = &ans.PolicyVersion
		}
		if len(res) != len(jobs) {
			return nil, fmt.Errorf("scorer answered %d jobs for %d", len(res), len(jobs))
		}
		if lowerAnswer {
			return s.rawAnswer(protocol.MediaTypeLowerGraphs, func(dst []byte) ([]byte, error) {
				return protocol.AppendLowerGraphs(dst, version, res)
			})
		}
		out := protocol.AttentionResponse{Results: make([]protocol.WireJobResult, len(res)), PolicyVersion: version}
		for i, g := range res {
			out.Results[i] = protocol.GraphsToWire(g)
		}
		if binaryAnswer {
			return s.rawAnswer(protocol.MediaTypeGraphs, func(dst []byte) ([]byte, error) {
				return protocol.AppendGraphs(dst, out)
			})
		}
		return out, nil
	})
}
