package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/protocol"
)

// broken is a scorer whose every model call fails.
type broken struct{ scorer.Scorer }

func (broken) ScoreRows(context.Context, []scorer.RowSet) ([]scorer.RowScores, scorer.Usage, error) {
	return nil, scorer.Usage{}, errors.New("the model is gone")
}

func getLive(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url + protocol.PathLive)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func TestLiveRunsACanaryOnlyWhenIdle(t *testing.T) {
	srv := New(local.New(scorertest.Tiny()))
	url, _ := scorertest.Serve(t, srv)
	if st, m := getLive(t, url); st != 200 || m["model"] != "canary" || srv.live.canaries.Load() != 1 {
		t.Fatalf("first /livez: %d %v after %d canaries, want 200 from one canary", st, m, srv.live.canaries.Load())
	}
	if st, m := getLive(t, url); st != 200 || m["model"] != "ok" || srv.live.canaries.Load() != 1 {
		t.Errorf("second /livez: %d %v after %d canaries, want 200 from the first canary's success", st, m, srv.live.canaries.Load())
	}
}

func TestLiveFailsWhenTheModelFails(t *testing.T) {
	srv := New(broken{local.New(scorertest.Tiny())})
	url, _ := scorertest.Serve(t, srv)
	st, m := getLive(t, url)
	if st != 503 || m["code"] != scorer.CodeOverloaded || !strings.Contains(m["error"], "the model is gone") {
		t.Errorf("/livez of a broken model: %d %v, want 503 naming the canary's error", st, m)
	}
}

func TestLiveIsOkWhileARequestIsServed(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{}, 4)
	srv := New(&scorertest.Gated{Scorer: local.New(scorertest.Tiny()), Gate: block, Entered: entered})
	url, _ := scorertest.Serve(t, srv)
	body, _ := json.Marshal(protocol.SetsToWire(scorertest.MakeSets(1, 1, 1)))
	done := make(chan int)
	go func() {
		st, _ := scorertest.Post(t, url+protocol.PathScore, map[string]string{protocol.Header: protocol.Version}, body)
		done <- st
	}()
	<-entered
	if st, m := getLive(t, url); st != 200 || m["model"] != "busy" || srv.live.canaries.Load() != 0 {
		t.Errorf("/livez while a request is served: %d %v (%d canaries), want 200 busy without a canary", st, m, srv.live.canaries.Load())
	}
	close(block)
	if st := <-done; st != 200 {
		t.Errorf("request: %d", st)
	}
	if st, m := getLive(t, url); st != 200 || m["model"] != "ok" {
		t.Errorf("/livez after a served request: %d %v, want 200 ok", st, m)
	}
}
