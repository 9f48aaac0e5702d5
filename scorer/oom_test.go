package scorer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
	"github.com/creditflow/creditflow/scorer/server"
)

// TestClientOutOfMemoryIsAPermanentRejection: a scorer whose accelerator cannot hold a
// request answers 413 out_of_memory (the GPU pod does). The client splits the request
// like any 413; a single set that still does not fit is rejected with that code and the
// scorer's message (the record is dead-lettered with it), never retried as unavailable.
func TestClientOutOfMemoryIsAPermanentRejection(t *testing.T) {
	real := server.New(local.New(scorertest.Tiny()))
	const fits = 6000 // request bytes that "fit the accelerator"
	var ooms atomic.Int64
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.PathScore {
			body, _ := io.ReadAll(r.Body)
			if len(body) > fits {
				ooms.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set(protocol.Header, protocol.Version)
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				json.NewEncoder(w).Encode(protocol.ErrorBody{Code: scorer.CodeOutOfMemory,
					Error: "scorer ran out of accelerator memory on 9000 tokens; requests of up to 3000 tokens have fit"})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		real.Handler().ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: front}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, []string{"http://" + ln.Addr().String()}, client.WithMaxWait(time.Millisecond))

	// Sixteen sets in one call: too large together, split until each part fits.
	sets := scorertest.MakeSets(21, 16, 4)
	got, _, err := c.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatalf("16 sets over the memory limit together: %v, want them split and scored", err)
	}
	scorertest.EqualScores(t, "after out_of_memory splits", got, scorertest.ExpectedScores(t, sets))
	if ooms.Load() == 0 {
		t.Fatal("no request ran out of memory: the test's limit is too high")
	}

	// One set that does not fit alone: a rejection with the scorer's code and message.
	huge := scorer.RowSet{ID: "huge"}
	for k := 0; k < 60; k++ {
		huge.Rows = append(huge.Rows, sets[0].Rows[0])
	}
	before := ooms.Load()
	_, _, err = c.ScoreRows(context.Background(), append(append([]scorer.RowSet(nil), sets[:2]...), huge))
	rej, ok := scorertest.AsRejected(err)
	if !ok || rej.Code != scorer.CodeOutOfMemory || rej.ID != "huge" || rej.Item != 2 ||
		!strings.Contains(rej.Message, "up to 3000 tokens have fit") {
		t.Fatalf("a set too large for the accelerator: %v, want an out_of_memory rejection of item 2 naming what fits", err)
	}
	if n := ooms.Load() - before; n > 3 {
		t.Errorf("%d out_of_memory answers for one set: the client retried a permanent rejection", n)
	}
}
