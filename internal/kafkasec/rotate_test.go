package kafkasec_test

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/producers"
)

// writeAtomic replaces path the way the kubelet updates a mounted secret:
// the new content appears at once, never half-written.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// writeStrimziUser writes c as Strimzi's KafkaUser secret holds it:
// user.crt and user.key (PKCS #8).
func writeStrimziUser(t *testing.T, dir string, c tls.Certificate) (crt, key string) {
	t.Helper()
	kb, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	crt, key = filepath.Join(dir, "user.crt"), filepath.Join(dir, "user.key")
	writeAtomic(t, crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
	writeAtomic(t, key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
	return crt, key
}

// flow is a producer and a group consumer running through sec; send
// writes a value and waits for the consumer to read it.
type flow struct {
	t    *testing.T
	p    *producers.Producer
	recv chan string
}

func startFlow(t *testing.T, ctx context.Context, brokers []string, sec kafkasec.Config) *flow {
	t.Helper()
	if err := producers.EnsureTopics(ctx, brokers, sec, producers.TopicSpec{Name: "rot", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p, err := producers.New(producers.Config{Brokers: brokers, Security: sec, RetryFor: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	g, err := consumers.NewGroup(consumers.Config{Brokers: brokers, GroupID: "rot", Topics: []string{"rot"}, Security: sec,
		SessionTimeout: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &flow{t: t, p: p, recv: make(chan string, 16)}
	go func() {
		err := g.Run(ctx, func(ctx context.Context, cl consumers.Claim, commit consumers.CommitFunc) error {
			for r := range cl.Records {
				_ = commit(ctx, r.Offset+1)
				f.recv <- string(r.Value)
			}
			return nil
		})
		if err != nil {
			f.recv <- "group stopped: " + err.Error()
		}
	}()
	return f
}

func (f *flow) send(ctx context.Context, v string) {
	f.t.Helper()
	if err := f.p.Produce(ctx, producers.Message{Topic: "rot", Value: []byte(v)}); err != nil {
		f.t.Fatalf("producing %q: %v", v, err)
	}
	for {
		select {
		case got := <-f.recv:
			if got == v {
				return
			}
			if len(got) > 14 && got[:14] == "group stopped:" {
				f.t.Fatal(got)
			}
		case <-ctx.Done():
			f.t.Fatalf("the consumer did not read %q", v)
		}
	}
}

// TestCertificateAndCARotationWithoutRestart: a producer and a group
// consumer configured with Strimzi's files (ca.crt of the cluster CA
// secret, user.crt and user.key of the KafkaUser secret, in two
// directories) keep working when the broker moves to a new CA and accepts
// only client certificates of a new clients CA: the files are replaced
// while they run, every connection is cut, and the new connections use
// the new files.
func TestCertificateAndCARotationWithoutRestart(t *testing.T) {
	oldCA, newCA := testpki.New(t), testpki.New(t)
	var serverCert atomic.Pointer[tls.Certificate]
	var clientCAs atomic.Pointer[x509.CertPool]
	sc := oldCA.Issue(t, "broker", true)
	serverCert.Store(&sc)
	clientCAs.Store(oldCA.Pool())
	b, err := broker.Start(broker.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serverCert.Load(), nil },
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = c.Verify(x509.VerifyOptions{Roots: clientCAs.Load(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			return err
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	caDir, userDir := t.TempDir(), t.TempDir()
	caFile := filepath.Join(caDir, "ca.crt")
	writeAtomic(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: oldCA.Cert.Raw}))
	crt, key := writeStrimziUser(t, userDir, oldCA.Issue(t, "creditflow", false))
	tc, err := kafkasec.LoadTLS(caFile, crt, key, false)
	if err != nil {
		t.Fatal(err)
	}
	sec := kafkasec.Config{TLS: tc}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := startFlow(t, ctx, b.Addrs(), sec)
	f.send(ctx, "before")

	// The rotation: new files, then the broker switches, then every
	// connection is cut.
	writeAtomic(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: newCA.Cert.Raw}))
	writeStrimziUser(t, userDir, newCA.Issue(t, "creditflow", false))
	nsc := newCA.Issue(t, "broker", true)
	serverCert.Store(&nsc)
	clientCAs.Store(newCA.Pool())
	b.Cut()
	b.Restore()
	f.send(ctx, "after")

	// A client that read the files once (the old behaviour) is refused now.
	stale := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: oldCA.Pool(), Certificates: []tls.Certificate{oldCA.Issue(t, "old", false)}}
	if err := (kafkasec.Config{TLS: stale}).Check(ctx, b.Addrs()); !errors.Is(err, kafkasec.ErrAuthentication) {
		t.Fatalf("a client with the old CA and certificate: %v, want ErrAuthentication", err)
	}
}

// TestPasswordRotationWithoutRestart: with --sasl-password-file (Strimzi's
// password key), a producer and a group consumer keep working when the
// user's SCRAM password changes on the broker and in the file while they
// run: new connections read the new password.
func TestPasswordRotationWithoutRestart(t *testing.T) {
	const mech = "SCRAM-SHA-256"
	b, err := broker.Start(broker.WithSASL(mech, "admin", "admin-pass"), broker.WithSASL(mech, "svc", "old-pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pwFile := filepath.Join(t.TempDir(), "password")
	writeAtomic(t, pwFile, []byte("old-pass"))
	sec := kafkasec.Config{SASLMechanism: mech, Username: "svc", PasswordFile: pwFile}
	if s := sec.String(); !sec.Reloads() || s != `tls=off sasl=SCRAM-SHA-256 user="svc" password=file` {
		t.Fatalf("description %q, reloads %v", s, sec.Reloads())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := startFlow(t, ctx, b.Addrs(), sec)
	f.send(ctx, "before")

	setSCRAMPassword(t, ctx, b.Addrs(), "svc", "new-pass")
	writeAtomic(t, pwFile, []byte("new-pass\n"))
	b.Cut()
	b.Restore()
	f.send(ctx, "after")
	if err := (kafkasec.Config{SASLMechanism: mech, Username: "svc", Password: "old-pass"}).Check(ctx, b.Addrs()); !errors.Is(err, kafkasec.ErrAuthentication) {
		t.Fatalf("the old password: %v, want ErrAuthentication", err)
	}
}

// setSCRAMPassword changes user's SCRAM-SHA-256 password on the broker, as
// an operator (Strimzi's user operator) does.
func setSCRAMPassword(t *testing.T, ctx context.Context, brokers []string, user, password string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pass"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, 4096, sha256.Size)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = user, 1, 4096, salt, salted
	req.Upsertions = append(req.Upsertions, up)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Results {
		if r.ErrorCode != 0 {
			t.Fatalf("changing the password of %s: error code %d", r.User, r.ErrorCode)
		}
	}
}
