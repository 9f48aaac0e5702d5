package scorer_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// counter wraps a handler and counts the work requests reaching it.
type counter struct {
	h                http.Handler
	score, attention atomic.Int64
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case protocol.PathScore:
		c.score.Add(1)
	case protocol.PathAttention:
		c.attention.Add(1)
	}
	c.h.ServeHTTP(w, r)
}

func newClient(t testing.TB, urls []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// writeError answers as a failing scorer does: the status and a protocol
// error body.
func writeError(w http.ResponseWriter, status int, body protocol.ErrorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(protocol.Header, protocol.Version)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// scoreEachAtOnce scores every set in a caller of its own, all at once, and
// checks each answer against want.
func scoreEachAtOnce(t *testing.T, c *client.Client, sets []scorer.RowSet, want []scorer.RowScores, what string) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, err := c.ScoreRows(context.Background(), sets[i:i+1])
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			scorertest.EqualScores(t, what, got, want[i:i+1])
		}()
	}
	wg.Wait()
}
