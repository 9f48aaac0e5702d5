package kafkasec

// Credentials that are read again when their files change, so that a
// rotated certificate, CA or password (a Kubernetes secret updated in
// place: Strimzi's user.crt, user.key and password of a KafkaUser, ca.crt
// of the cluster CA secret) is used by the next connection without a
// restart. Connections already open keep the credentials they were
// opened with.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go/sasl"
)

// fileCache holds what was parsed from some files, parsed again when
// their bytes change.
type fileCache[T any] struct {
	files []string
	parse func(data [][]byte) (T, error)

	mu   sync.Mutex
	last [][]byte
	val  T
}

// get reads the files and returns the parsed value, parsing again only
// when a file's bytes changed. A file that cannot be read or parsed now
// (caught mid-update) keeps the last good value, when there is one.
func (f *fileCache[T]) get() (T, error) {
	data := make([][]byte, len(f.files))
	var rerr error
	for i, name := range f.files {
		b, err := os.ReadFile(name)
		if err != nil {
			rerr = err
			break
		}
		data[i] = b
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rerr == nil && f.last != nil && sameBytes(data, f.last) {
		return f.val, nil
	}
	if rerr == nil {
		v, err := f.parse(data)
		if err == nil {
			f.last, f.val = data, v
			return v, nil
		}
		rerr = err
	}
	if f.last != nil {
		return f.val, nil
	}
	var zero T
	return zero, rerr
}

func sameBytes(a, b [][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func parsePool(caFile string) func([][]byte) (*x509.CertPool, error) {
	return func(d [][]byte) (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(d[0]) {
			return nil, fmt.Errorf("kafkasec: CA file %s holds no PEM certificate", caFile)
		}
		return pool, nil
	}
}

func parsePair(certFile, keyFile string) func([][]byte) (*tls.Certificate, error) {
	return func(d [][]byte) (*tls.Certificate, error) {
		c, err := tls.X509KeyPair(d[0], d[1])
		if err != nil {
			return nil, fmt.Errorf("kafkasec: loading client certificate %s / key %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}
}

// verifyWith verifies the broker's chain against the CA pool of cas, read
// again when the file changes (crypto/tls verifies against a fixed pool:
// the configuration skips its check and this one takes its place).
func verifyWith(cas *fileCache[*x509.CertPool]) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		pool, err := cas.get()
		if err != nil {
			return err
		}
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("kafkasec: the broker sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: pool, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		return nil
	}
}

// fileMechanism is a SASL mechanism whose password is read from a file
// at every authentication (every new connection).
type fileMechanism struct {
	name, user string
	pw         *fileCache[string]
}

func (m fileMechanism) Name() string { return m.name }

func (m fileMechanism) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	pw, err := m.pw.get()
	if err != nil {
		return nil, nil, err
	}
	inner, err := mechanism(m.name, m.user, pw)
	if err != nil {
		return nil, nil, err
	}
	return inner.Start(ctx)
}

// PasswordFile returns a cache of the password in path (surrounding white
// space trimmed), read again when the file changes.
func passwordFile(path string) *fileCache[string] {
	return &fileCache[string]{files: []string{path}, parse: func(d [][]byte) (string, error) {
		return strings.TrimSpace(string(d[0])), nil
	}}
}

// RotationGrace is how long clients whose credentials are read from files
// (Config.Reloads) keep retrying when the brokers refuse them, before they
// report ErrAuthentication: while a secret is rotated the brokers may
// already expect the new credentials and the kubelet not yet have written
// them (it syncs mounted secrets within about a minute).
const RotationGrace = 2 * time.Minute

// Reloads reports whether c's credentials are read again from files at
// every new connection (LoadTLS with a CA or a client certificate, or a
// PasswordFile).
func (c Config) Reloads() bool {
	return c.PasswordFile != "" || (c.TLS != nil && (c.TLS.GetClientCertificate != nil || c.TLS.VerifyConnection != nil))
}
