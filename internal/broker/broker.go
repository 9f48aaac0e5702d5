// Package broker runs an embedded Kafka broker in the process: a cluster of
// one or more brokers that speak the real Kafka wire protocol (built on
// franz-go's kfake), for tests, the demo and `creditflow broker`.
//
// Guarantees and limits:
//   - Clients (kafka-go, librdkafka/kcat, confluent-kafka for Python, Java)
//     connect to Addrs() exactly as to a real cluster; produce, fetch,
//     consumer groups, offset commits, topic creation, TLS (with client
//     certificates) and SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 work.
//   - Data lives in memory and is lost on Close. A closed broker cannot be
//     restarted with the same data; to simulate an outage use Cut and
//     Restore, which drop every client connection and refuse new ones while
//     keeping the data and the listening ports.
//   - SASL works with librdkafka-based clients too: the brokers implement
//     SaslHandshake v1 only, and librdkafka insists on v0 being listed, so
//     the ApiVersions answer is adjusted on the wire (see saslcompat.go).
//   - Produce requests above the maximum message size (WithMaxMessageBytes,
//     default 1 MiB + 12 bytes like Kafka) are rejected.
//   - Consumer groups (classic protocol) use a minimum session timeout of
//     WithGroupMinSessionTimeout (default 1 s), so that tests can use short
//     sessions.
package broker

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
)

type config struct {
	host              string
	port              int
	brokers           int
	partitions        int
	tls               *tls.Config
	sasl              []saslUser
	maxMessageBytes   int
	logger            zerolog.Logger
	hasLogger         bool
	topics            map[string]int
	minSessionTimeout time.Duration
}

type saslUser struct{ mech, user, pass string }

// Option configures Start.
type Option func(*config) error

// WithAddr sets the listening address of the first broker (default
// "127.0.0.1:0", any free port). With several brokers, broker i listens on
// port+i, or on a free port when port is 0. The host is also the address
// the brokers advertise to clients, so use a concrete address (not 0.0.0.0).
func WithAddr(addr string) Option {
	return func(c *config) error {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("broker: address %q is not host:port: %w", addr, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("broker: address %q has an invalid port", addr)
		}
		if h == "" {
			h = "127.0.0.1"
		}
		c.host, c.port = h, port
		return nil
	}
}

// WithBrokers sets the number of brokers in the cluster (default 1).
func WithBrokers(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("broker: need at least one broker, got %d", n)
		}
		c.brokers = n
		return nil
	}
}

// WithDefaultPartitions sets the partition count of topics created without
// an explicit count (auto-created or CreateTopics with -1). Default 3.
func WithDefaultPartitions(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("broker: default partitions must be >= 1, got %d", n)
		}
		c.partitions = n
		return nil
	}
}

// WithTopics creates topics at start, each with the given number of
// partitions (<= 0: the default partition count).
func WithTopics(partitions int, names ...string) Option {
	return func(c *config) error {
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("broker: empty topic name")
			}
			c.topics[n] = partitions
		}
		return nil
	}
}

// WithTLS makes the brokers accept TLS only, with the given server
// configuration. Set ClientAuth to tls.RequireAndVerifyClientCert and
// ClientCAs to require client certificates.
func WithTLS(t *tls.Config) Option {
	return func(c *config) error {
		if t == nil || (len(t.Certificates) == 0 && t.GetCertificate == nil) {
			return fmt.Errorf("broker: TLS configuration needs a server certificate")
		}
		c.tls = t
		return nil
	}
}

// WithSASL requires SASL authentication and adds a user with the given
// mechanism ("PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"). Repeat it to add
// users or mechanisms.
func WithSASL(mechanism, user, password string) Option {
	return func(c *config) error {
		m := strings.ToUpper(mechanism)
		switch m {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return fmt.Errorf("broker: unknown SASL mechanism %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
		}
		if user == "" {
			return fmt.Errorf("broker: SASL user name is empty")
		}
		c.sasl = append(c.sasl, saslUser{m, user, password})
		return nil
	}
}

// WithMaxMessageBytes sets the largest produce batch the brokers accept
// (Kafka's message.max.bytes; default 1048588).
func WithMaxMessageBytes(n int) Option {
	return func(c *config) error {
		if n < 1024 {
			return fmt.Errorf("broker: max message bytes %d is too small (minimum 1024)", n)
		}
		c.maxMessageBytes = n
		return nil
	}
}

// WithGroupMinSessionTimeout sets the smallest consumer-group session
// timeout the brokers accept (default 1 s).
func WithGroupMinSessionTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("broker: minimum session timeout must be positive")
		}
		c.minSessionTimeout = d
		return nil
	}
}

// WithLogger sends the brokers' warnings and errors to l.
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error {
		c.logger, c.hasLogger = l, true
		return nil
	}
}

// Broker is a running embedded cluster.
type Broker struct {
	cluster *kfake.Cluster
	addrs   []string

	mu        sync.Mutex
	cut       bool
	listeners []*cutListener
	closeOnce sync.Once
}

// Start starts the cluster and returns once every broker listens.
func Start(opts ...Option) (*Broker, error) {
	c := config{host: "127.0.0.1", brokers: 1, partitions: 3, topics: map[string]int{},
		minSessionTimeout: time.Second}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	b := &Broker{}
	ports := make([]int, c.brokers)
	for i := range ports {
		if c.port != 0 {
			ports[i] = c.port + i
		} else {
			// kfake treats port 0 as "pick one"; keep the count right.
			ports[i] = 0
		}
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(c.brokers),
		kfake.ClusterID("creditflow"),
		kfake.DefaultNumPartitions(c.partitions),
		kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(c.minSessionTimeout),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			// kfake asks for 127.0.0.1:<port>; honour the configured host.
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(c.host, p))
			if err != nil {
				return nil, fmt.Errorf("broker: listen on %s: %w (is another broker running there?)", net.JoinHostPort(c.host, p), err)
			}
			cl := &cutListener{Listener: ln, b: b, conns: map[net.Conn]struct{}{}}
			b.mu.Lock()
			b.listeners = append(b.listeners, cl)
			b.mu.Unlock()
			// TLS is terminated here rather than by kfake so that the
			// SASL compatibility layer sees plaintext frames.
			var out net.Listener = cl
			if c.tls != nil {
				out = tls.NewListener(out, c.tls)
			}
			if len(c.sasl) > 0 {
				out = compatListener{out}
			}
			return out, nil
		}),
	}
	if c.port != 0 {
		kopts = append(kopts, kfake.Ports(ports...))
	}
	if len(c.sasl) > 0 {
		kopts = append(kopts, kfake.EnableSASL())
		for _, u := range c.sasl {
			kopts = append(kopts, kfake.Superuser(u.mech, u.user, u.pass))
		}
	}
	if c.maxMessageBytes > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(c.maxMessageBytes)}))
	}
	if c.hasLogger {
		kopts = append(kopts, kfake.WithLogger(zlog{c.logger}))
	}
	if len(c.topics) > 0 {
		byCount := map[int][]string{}
		for t, p := range c.topics {
			byCount[p] = append(byCount[p], t)
		}
		for p, ts := range byCount {
			kopts = append(kopts, kfake.SeedTopics(int32(p), ts...))
		}
	}
	cluster, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start: %w", err)
	}
	b.cluster = cluster
	b.addrs = cluster.ListenAddrs()
	return b, nil
}

// Addrs returns the host:port of every broker (the bootstrap list).
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Cluster returns the underlying kfake cluster, for fault injection in
// tests (moving partition leaders, controlling requests).
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Cut simulates an outage: every open client connection is closed and new
// connections are closed as soon as they are accepted, until Restore. The
// data, topics and committed offsets are kept.
func (b *Broker) Cut() {
	b.mu.Lock()
	b.cut = true
	ls := append([]*cutListener(nil), b.listeners...)
	b.mu.Unlock()
	for _, l := range ls {
		l.closeAll()
	}
}

// Restore ends an outage started by Cut.
func (b *Broker) Restore() {
	b.mu.Lock()
	b.cut = false
	b.mu.Unlock()
}

func (b *Broker) isCut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut
}

// Close stops the cluster and drops its data. It is safe to call twice.
func (b *Broker) Close() {
	b.closeOnce.Do(func() { b.cluster.Close() })
}

// cutListener tracks accepted connections so that Cut can drop them.
type cutListener struct {
	net.Listener
	b     *Broker
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.b.isCut() {
			_ = c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.mu.Lock()
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

func (l *cutListener) closeAll() {
	l.mu.Lock()
	cs := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *cutListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// zlog adapts zerolog to kfake's logger; broker info/debug chatter is
// logged at debug level.
type zlog struct{ l zerolog.Logger }

func (z zlog) Logf(level kfake.LogLevel, format string, args ...any) {
	var ev *zerolog.Event
	switch level {
	case kfake.LogLevelError:
		ev = z.l.Error()
	case kfake.LogLevelWarn:
		ev = z.l.Warn()
	default:
		ev = z.l.Debug()
	}
	ev.Str("component", "broker").Msgf(format, args...)
}
