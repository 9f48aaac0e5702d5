package scorer_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/scorer/client"
	"github.com/creditflow/creditflow/scorer/internal/scorertest"
	"github.com/creditflow/creditflow/scorer/local"
	"github.com/creditflow/creditflow/scorer/server"
)

// TestDiscoveredHTTPSCheckedAgainstTheServiceName: a dns+https endpoint's
// pods are dialled at their addresses, and their certificate, which names
// the service (not the pods' IP addresses), is checked against that name.
func TestDiscoveredHTTPSCheckedAgainstTheServiceName(t *testing.T) {
	const name = "scorer-headless.ns.svc"
	ca := testpki.New(t)
	cert := ca.IssueFor(t, name)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.New(local.New(scorertest.Tiny())).Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	resolver := func(_ context.Context, host string) ([]string, error) {
		if host != name {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []string{"127.0.0.1"}, nil
	}
	c, err := client.New([]string{"dns+https://" + name + ":" + port}, client.WithResolver(resolver),
		client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), client.WithMaxWait(0),
		client.WithRequestTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sets := scorertest.MakeSets(2, 20, 3)
	want := scorertest.ExpectedScores(t, sets)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, _, err := c.ScoreRows(ctx, sets)
	if err != nil {
		t.Fatalf("scoring through dns+https with a certificate for %s only: %v", name, err)
	}
	scorertest.EqualScores(t, "dns+https scorer", got, want)
}
