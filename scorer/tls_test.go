package scorer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
)

// writeCerts makes a CA and a server certificate for 127.0.0.1 signed by
// it; it returns the CA, certificate and key file paths.
func writeCerts(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.New(t)
	certFile, keyFile = testpki.Write(t, dir, "cert", ca.Issue(t, "scorer", true))
	return ca.WriteCA(t, dir), certFile, keyFile
}

func TestTLSAndBearerToken(t *testing.T) {
	caFile, certFile, keyFile := writeCerts(t)
	srv := server.New(local.New(scorertest.Tiny()), server.WithTLS(certFile, keyFile), server.WithToken("right-token"))
	url, _ := scorertest.Serve(t, srv)
	url = strings.Replace(url, "http://", "https://", 1)
	sets := scorertest.MakeSets(20, 3, 3)
	want := scorertest.ExpectedScores(t, sets)

	c := newClient(t, []string{url}, client.WithCAFile(caFile), client.WithBearerToken("right-token"))
	got, _, err := c.ScoreRows(context.Background(), sets)
	if err != nil {
		t.Fatal(err)
	}
	scorertest.EqualScores(t, "over TLS", got, want)
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A scheme-less endpoint defaults to https once a CA is given.
	bare := newClient(t, []string{strings.TrimPrefix(url, "https://")}, client.WithCAFile(caFile), client.WithBearerToken("right-token"))
	if _, _, err := bare.ScoreRows(context.Background(), sets); err != nil {
		t.Fatalf("scheme-less endpoint: %v", err)
	}

	for name, opts := range map[string][]client.Option{
		"wrong token": {client.WithCAFile(caFile), client.WithBearerToken("wrong-token")},
		"no token":    {client.WithCAFile(caFile)},
	} {
		c := newClient(t, []string{url}, opts...)
		_, _, err := c.ScoreRows(context.Background(), sets)
		var se *scorer.StatusError
		if !errors.As(err, &se) || se.Status != 401 || se.Code != scorer.CodeUnauthorized {
			t.Errorf("%s: %v, want 401 unauthorized", name, err)
		}
		if _, ok := scorertest.AsRejected(err); ok {
			t.Errorf("%s: auth failure reported as a rejection of the input", name)
		}
		if st := c.Stats(); st.Requests != 1 {
			t.Errorf("%s: %d attempts, want 1 (no retry on 401)", name, st.Requests)
		}
		if _, err := c.Info(context.Background()); err == nil {
			t.Errorf("%s: Info succeeded", name)
		}
	}
	// Without the CA the server's certificate is not trusted.
	untrusted := newClient(t, []string{url}, client.WithBearerToken("right-token"), client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	if _, _, err := untrusted.ScoreRows(context.Background(), sets); err == nil {
		t.Error("a client without the CA trusted the self-signed server")
	}
}
