// Package kafkasec holds the one security configuration that every Kafka
// client of creditflow (producers, group consumers, admin calls, the
// changelog reader) is built from, so that TLS and SASL are set in one place
// and behave the same everywhere.
//
// Guarantees:
//   - A zero Config means plaintext without authentication.
//   - Config.String never contains the password; it is safe to log.
//   - Dialer and Transport return a fresh client object each call; the
//     Config itself is an immutable value and is never modified.
//   - An unknown SASL mechanism, or a mechanism without a user name, is an
//     error at construction time, not at the first connection.
package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanism names accepted in Config.SASLMechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// DialTimeout is the connection timeout of the dialers and transports built
// from a Config.
const DialTimeout = 10 * time.Second

// Config is the security configuration of a Kafka client.
type Config struct {
	// TLS enables TLS when non-nil; nil means plaintext.
	TLS *tls.Config
	// SASLMechanism is "" (no SASL), "PLAIN", "SCRAM-SHA-256" or
	// "SCRAM-SHA-512" (case-insensitive).
	SASLMechanism string
	// Username and Password are the SASL credentials.
	Username, Password string
	// PasswordFile, when set, holds the SASL password instead of
	// Password; it is read again for every new connection, so a rotated
	// password (a secret updated in place) needs no restart.
	PasswordFile string
}

// Mechanism returns the kafka-go SASL mechanism of c, or nil when SASL is
// off.
func (c Config) Mechanism() (sasl.Mechanism, error) {
	mech := strings.ToUpper(strings.TrimSpace(c.SASLMechanism))
	if mech == "" {
		return nil, nil
	}
	if c.Username == "" {
		return nil, fmt.Errorf("kafkasec: SASL mechanism %s needs a user name: set the SASL user (and password)", mech)
	}
	if c.PasswordFile != "" {
		pw := passwordFile(c.PasswordFile)
		p, err := pw.get()
		if err != nil {
			return nil, fmt.Errorf("kafkasec: SASL password file: %w", err)
		}
		if _, err := mechanism(mech, c.Username, p); err != nil {
			return nil, err
		}
		return fileMechanism{name: mech, user: c.Username, pw: pw}, nil
	}
	return mechanism(mech, c.Username, c.Password)
}

// mechanism is the kafka-go mechanism mech (upper case) for user and password.
func mechanism(mech, user, password string) (sasl.Mechanism, error) {
	switch mech {
	case MechanismPlain:
		return plain.Mechanism{Username: user, Password: password}, nil
	case MechanismSCRAMSHA256:
		m, err := scram.Mechanism(scram.SHA256, user, password)
		if err != nil {
			return nil, fmt.Errorf("kafkasec: SCRAM-SHA-256 set-up: %w", err)
		}
		return m, nil
	case MechanismSCRAMSHA512:
		m, err := scram.Mechanism(scram.SHA512, user, password)
		if err != nil {
			return nil, fmt.Errorf("kafkasec: SCRAM-SHA-512 set-up: %w", err)
		}
		return m, nil
	default:
		return nil, fmt.Errorf("kafkasec: unknown SASL mechanism %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
	}
}

// Validate reports a configuration error without connecting anywhere.
func (c Config) Validate() error {
	_, err := c.Mechanism()
	return err
}

// Dialer returns a kafka-go Dialer (used by consumer groups, connections
// and readers) with c's TLS and SASL settings.
func (c Config) Dialer() (*kafka.Dialer, error) {
	m, err := c.Mechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{
		ClientID:      "creditflow",
		Timeout:       DialTimeout,
		DualStack:     true,
		TLS:           cloneTLS(c.TLS),
		SASLMechanism: m,
	}, nil
}

// Transport returns a kafka-go Transport (used by writers and the admin
// client) with c's TLS and SASL settings.
func (c Config) Transport() (*kafka.Transport, error) {
	m, err := c.Mechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{
		ClientID:    "creditflow",
		DialTimeout: DialTimeout,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 10 * time.Second,
		TLS:         cloneTLS(c.TLS),
		SASL:        m,
	}, nil
}

// String describes c for logs: TLS on/off and the SASL mechanism and user.
// It never prints the password.
func (c Config) String() string {
	var b strings.Builder
	if c.TLS == nil {
		b.WriteString("tls=off")
	} else {
		b.WriteString("tls=on")
		if c.TLS.InsecureSkipVerify && c.TLS.VerifyConnection == nil {
			b.WriteString("(insecure-skip-verify)")
		}
		if len(c.TLS.Certificates) > 0 || c.TLS.GetClientCertificate != nil {
			b.WriteString("(client-cert)")
		}
	}
	if c.SASLMechanism == "" {
		b.WriteString(" sasl=off")
	} else {
		fmt.Fprintf(&b, " sasl=%s user=%q", strings.ToUpper(c.SASLMechanism), c.Username)
		if c.PasswordFile != "" {
			b.WriteString(" password=file")
		} else if c.Password != "" {
			b.WriteString(" password=set")
		}
	}
	return b.String()
}

// GoString is String, so that %#v does not print the password either.
func (c Config) GoString() string { return "kafkasec.Config{" + c.String() + "}" }

// LoadTLS builds a client TLS configuration from PEM files. caFile (may be
// empty: system roots) verifies the brokers; certFile and keyFile (both or
// neither) are the client certificate for mutual TLS (a PKCS #1, PKCS #8 or
// EC key: Strimzi's user.crt and user.key as they are). The files are read
// now (an error is reported at once) and again, when their bytes changed,
// at every new connection: a rotated certificate or CA needs no restart.
// insecureSkipVerify disables broker verification and is meant only for
// local testing.
func LoadTLS(caFile, certFile, keyFile string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // opt-in by the caller
	if caFile != "" {
		cas := &fileCache[*x509.CertPool]{files: []string{caFile}, parse: parsePool(caFile)}
		pool, err := cas.get()
		if err != nil {
			if os.IsNotExist(err) || errors.Is(err, os.ErrPermission) {
				return nil, fmt.Errorf("kafkasec: reading CA file: %w", err)
			}
			return nil, err
		}
		cfg.RootCAs = pool // what a copy used without the check below trusts
		if !insecureSkipVerify {
			// The check against the CA read now is done by VerifyConnection
			// (crypto/tls's own check would keep the pool of the start).
			cfg.InsecureSkipVerify = true //nolint:gosec // verified in VerifyConnection
			cfg.VerifyConnection = verifyWith(cas)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("kafkasec: a client certificate needs both the certificate file and the key file")
	}
	if certFile != "" {
		pair := &fileCache[*tls.Certificate]{files: []string{certFile, keyFile}, parse: parsePair(certFile, keyFile)}
		if _, err := pair.get(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get() }
	}
	return cfg, nil
}

func cloneTLS(c *tls.Config) *tls.Config {
	if c == nil {
		return nil
	}
	return c.Clone()
}

// ErrAuthentication marks a failed TLS handshake or SASL authentication:
// wrong user, password, mechanism or certificate. It is not retriable.
var ErrAuthentication = errors.New("kafka authentication failed")

// Check connects to the first reachable broker of brokers and
// authenticates. It returns nil on success, an error wrapping
// ErrAuthentication when the broker is reachable but refuses the
// credentials, or a connection error when no broker is reachable.
func (c Config) Check(ctx context.Context, brokers []string) error {
	d, err := c.Dialer()
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range brokers {
		raw, err := (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		_ = raw.Close()
		conn, err := d.DialContext(ctx, "tcp", b)
		if err == nil {
			// kafka-go authenticates lazily on some paths; make one request.
			_ = conn.SetDeadline(time.Now().Add(DialTimeout))
			_, err = conn.ApiVersions()
			_ = conn.Close()
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The TCP connection worked; a SASL error code or a TLS alert
		// means the credentials were refused.
		var certErr *tls.CertificateVerificationError
		switch {
		case errors.Is(err, kafka.SASLAuthenticationFailed), errors.Is(err, kafka.IllegalSASLState),
			errors.Is(err, kafka.UnsupportedSASLMechanism), errors.As(err, &certErr),
			c.TLS != nil && strings.Contains(err.Error(), "tls: "):
			return fmt.Errorf("%w at %s with %s: check the user name, password, mechanism and certificates (%v)", ErrAuthentication, b, c, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", b, err))
	}
	return fmt.Errorf("kafkasec: no broker reachable: %w", errors.Join(errs...))
}

// WaitReachable calls Check until a broker answers, the brokers refuse the
// credentials (an error wrapping ErrAuthentication, at once), or timeout
// passes. The timeout error names every address and its last failure
// (e.g. "connection refused"), and says what to check. It is the bounded
// start-up wait of the commands: a process pointed at the wrong address
// exits instead of retrying forever.
func (c Config) WaitReachable(ctx context.Context, brokers []string, timeout time.Duration) error {
	if len(brokers) == 0 {
		return errors.New("no brokers: set --brokers (or CREDITFLOW_BROKERS) to host:port,...")
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 200 * time.Millisecond
	var last error
	for {
		err := c.Check(ctx, brokers)
		if err == nil || errors.Is(err, ErrAuthentication) {
			return err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err()
			}
			return fmt.Errorf("no Kafka broker reachable within %v at %s: %v; check --brokers and that the brokers are up (or raise --startup-timeout)",
				timeout, strings.Join(brokers, ","), unwrapReachable(last))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// unwrapReachable drops Check's "kafkasec: no broker reachable: " prefix.
func unwrapReachable(err error) error {
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "kafkasec: no broker reachable: ") {
		return u
	}
	return err
}
