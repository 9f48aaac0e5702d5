package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
)

func TestClientHonoursContext(t *testing.T) {
	finished := make(chan struct{}) // closed when the server answers
	abandoned := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // lets the server notice the client leaving
		select {
		case <-time.After(5 * time.Second):
			close(finished)
			w.WriteHeader(500)
		case <-r.Context().Done():
			close(abandoned)
		}
	})
	url, _ := scorertest.ServeHandler(t, h)
	c, err := New([]string{url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err = c.ScoreRows(ctx, scorertest.MakeSets(1, 1, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-finished:
		t.Fatal("the caller returned only after the server answered")
	default:
	}
	// With its only caller gone the request itself is cancelled.
	select {
	case <-abandoned:
	case <-finished:
		t.Fatal("the request ran to its end although its caller had gone")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := c.Attention(ctx2, scorertest.MakeJobs(1, 1), scorer.AttentionOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	c.Close()
	if _, _, err := c.ScoreRows(context.Background(), scorertest.MakeSets(1, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
