package server

// GET /livez: liveness from the model (docs/scorer-protocol.md), as the GPU pod
// serves it (scorer/gpupod/cfpod/health.py) without the pod's accelerator errors.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/protocol"
)

const (
	// liveInterval: a model call that succeeded this recently proves the model alive.
	liveInterval = 10 * time.Second
	// canaryTimeout: the longest /livez waits for its canary.
	canaryTimeout = 5 * time.Second
)

// canarySet is the smallest request: one row of one context and one target token.
var canarySet = []scorer.RowSet{{ID: "canary", Rows: []scorer.Row{{Context: []int32{0}, Target: []int32{0}, Span: [2]int{0, 1}}}}}

type liveness struct {
	lastOK   atomic.Int64 // unix nanoseconds of the last successful model call
	canary   sync.Mutex   // one canary at a time; concurrent probes wait for it
	canaries atomic.Int64 // canaries run (tests)
}

func (l *liveness) succeeded() { l.lastOK.Store(time.Now().UnixNano()) }

func (l *liveness) fresh() bool {
	return time.Since(time.Unix(0, l.lastOK.Load())) <= liveInterval
}

// handleLive answers 200 while a model call succeeded within liveInterval or
// a request is being served (a busy model is alive); otherwise it runs the
// canary and answers 503 when it fails or takes longer than canaryTimeout.
// Draining does not fail it.
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	ok := func(how string) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "model": how, "protocol": protocol.Version})
	}
	if s.live.fresh() {
		ok("ok")
		return
	}
	if len(s.sem) > 0 {
		ok("busy")
		return
	}
	s.live.canary.Lock()
	defer s.live.canary.Unlock()
	if s.live.fresh() { // another probe's canary just ran
		ok("canary")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), canaryTimeout)
	defer cancel()
	s.live.canaries.Add(1)
	if _, _, err := s.s.ScoreRows(ctx, canarySet); err != nil {
		s.cfg.log.Error().Err(err).Msg("the model's canary failed")
		writeError(w, http.StatusServiceUnavailable, protocol.ErrorBody{Code: scorer.CodeOverloaded,
			Error: fmt.Sprintf("scorer is not live: the model's canary failed: %v", err)})
		return
	}
	s.live.succeeded()
	ok("canary")
}
