package kafkasec_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/producers"
)

func TestStringHidesPassword(t *testing.T) {
	c := kafkasec.Config{SASLMechanism: "SCRAM-SHA-512", Username: "alice", Password: "hunter2-secret", TLS: &tls.Config{}}
	for _, s := range []string{c.String(), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(&c)} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("password leaked: %s", s)
		}
		if !strings.Contains(s, "alice") || !strings.Contains(s, "SCRAM-SHA-512") {
			t.Errorf("description lacks user or mechanism: %s", s)
		}
	}
	// Nested in client configs, too.
	for _, s := range []string{fmt.Sprintf("%+v", producers.Config{Security: c}), fmt.Sprintf("%v", consumers.Config{Security: c})} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("password leaked through a client config: %s", s)
		}
	}
	if err := (kafkasec.Config{SASLMechanism: "GSSAPI", Username: "x"}).Validate(); err == nil {
		t.Fatal("unknown mechanism accepted")
	}
	if err := (kafkasec.Config{SASLMechanism: "PLAIN"}).Validate(); err == nil {
		t.Fatal("SASL without user accepted")
	}
}

// roundTrip produces one record and reads it back, with a group consumer
// too, through sec.
func roundTrip(t *testing.T, brokers []string, sec kafkasec.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := producers.EnsureTopics(ctx, brokers, sec, producers.TopicSpec{Name: "sec", Partitions: 1}); err != nil {
		return err
	}
	p, err := producers.New(producers.Config{Brokers: brokers, Security: sec, RetryFor: 3 * time.Second})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Produce(ctx, producers.Message{Topic: "sec", Key: []byte("k"), Value: []byte("secret payload")}); err != nil {
		return err
	}
	var got []string
	if _, err := consumers.ReadPartitionRange(ctx, brokers, sec, "sec", 0, -2, func(r consumers.Record) error {
		got = append(got, string(r.Value))
		return nil
	}); err != nil {
		return err
	}
	if len(got) != 1 || got[0] != "secret payload" {
		t.Fatalf("read back %q", got)
	}
	g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: "sec", Topics: []string{"sec"}, Security: sec,
		SessionTimeout: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	recv := make(chan string, 1)
	go func() {
		_ = g.Run(gctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			for r := range cl.Records {
				_ = commit(ctx, r.Offset+1)
				recv <- string(r.Value)
			}
			return nil
		})
	}()
	select {
	case v := <-recv:
		if v != "secret payload" {
			t.Fatalf("group read %q", v)
		}
	case <-ctx.Done():
		t.Fatal("group consumer got nothing")
	}
	return nil
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			b, err := broker.Start(broker.WithSASL(mech, "svc", "right-pass"))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := roundTrip(t, b.Addrs(), kafkasec.Config{SASLMechanism: mech, Username: "svc", Password: "right-pass"}); err != nil {
				t.Fatalf("round trip: %v", err)
			}
			p, err := producers.New(producers.Config{Brokers: b.Addrs(), RetryFor: 2 * time.Second,
				Security: kafkasec.Config{SASLMechanism: mech, Username: "svc", Password: "wrong-pass"}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err = p.Produce(ctx, producers.Message{Topic: "sec", Value: []byte("x")})
			if err == nil {
				t.Fatal("wrong password accepted")
			}
			if !errors.Is(err, kafkasec.ErrAuthentication) || ctx.Err() != nil {
				t.Fatalf("wrong password: unclear error or no fast failure: %v", err)
			}
			if strings.Contains(err.Error(), "wrong-pass") {
				t.Fatalf("error leaks the password: %v", err)
			}
			t.Logf("wrong password: %v", err)
			// The group consumer stops with the same error instead of
			// retrying forever.
			g, err := consumers.NewGroup(consumers.Config{Brokers: b.Addrs(), GroupID: "g", Topics: []string{"sec"},
				Security: kafkasec.Config{SASLMechanism: mech, Username: "svc", Password: "wrong-pass"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Run(ctx, func(context.Context, consumers.Claim, consumers.CommitFunc) error { return nil }); !errors.Is(err, kafkasec.ErrAuthentication) {
				t.Fatalf("group with a wrong password: Run returned %v, want ErrAuthentication", err)
			}
		})
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	pki := testpki.New(t)
	serverCert := pki.Issue(t, "broker", true)
	testpki.Write(t, dir, "client", pki.Issue(t, "client", false))
	pki.WriteCA(t, dir)
	pool := pki.Pool()
	b, err := broker.Start(broker.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tc, err := kafkasec.LoadTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, b.Addrs(), kafkasec.Config{TLS: tc}); err != nil {
		t.Fatalf("mTLS round trip: %v", err)
	}
	// Without a client certificate the broker refuses.
	noCert, err := kafkasec.LoadTLS(filepath.Join(dir, "ca.pem"), "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := consumers.EndOffsets(ctx, b.Addrs(), kafkasec.Config{TLS: noCert}, "sec"); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if _, err := kafkasec.LoadTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), "", false); err == nil {
		t.Fatal("certificate without key accepted")
	}
}
