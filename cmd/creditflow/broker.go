package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/creditflow/creditflow/internal/broker"
)

func init() {
	register("broker", "run the embedded Kafka broker for outside clients", runBroker)
}

func runBroker(args []string) error {
	fs := newFlagSet("broker", `usage: creditflow broker [--addr HOST:PORT] [--brokers N] [--topics T1,T2] [flags]

Runs an in-memory Kafka-compatible broker (franz-go's kfake; data is lost on exit) for outside
clients: kcat, librdkafka, Python, creditflow run. Prints the bootstrap list on stdout. Stop with
SIGINT or SIGTERM. See docs/kafka.md.`)
	var addr, topics, tlsCert, tlsKey, tlsCA, saslUser, saslPass, saslMech, logLevel *string
	var brokers, partitions, maxMsg *int
	fs.inGroup(groupKafka, func() {
		addr = fs.String("addr", "127.0.0.1:9092", "listen address of the first broker (port 0: any free port)")
		brokers = fs.Int("brokers", 1, "number of brokers (broker i listens on port+i)")
		partitions = fs.Int("partitions", 3, "partitions of the --topics and of auto-created topics")
		topics = fs.String("topics", "", "comma-separated topics to create at start")
		maxMsg = fs.Int("max-message-bytes", 0, "largest produce batch accepted (0: Kafka's default 1048588)")
	})
	fs.inGroup(groupSecurity, func() {
		tlsCert = fs.String("tls-cert", "", "server certificate (PEM); enables TLS")
		tlsKey = fs.String("tls-key", "", "server key (PEM)")
		tlsCA = fs.String("tls-ca", "", "CA (PEM) that client certificates must chain to; requires client certificates")
		saslUser = fs.String("sasl-user", "", "SASL user; enables SASL")
		saslPass = fs.String("sasl-password", "", "SASL password (or env CREDITFLOW_SASL_PASSWORD)")
		saslMech = fs.String("sasl-mechanism", "SCRAM-SHA-256", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or a comma-separated list")
	})
	fs.inGroup(groupObservability, func() {
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	})
	if err := fs.parse(args, false); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	switch {
	case *partitions < 1:
		return usagef("--partitions %d: want at least 1", *partitions)
	case *brokers < 1:
		return usagef("--brokers %d: want at least 1", *brokers)
	case (*tlsCert == "") != (*tlsKey == ""):
		return usagef("--tls-cert and --tls-key go together; give both or neither")
	case *tlsCA != "" && *tlsCert == "":
		return usagef("--tls-ca needs --tls-cert and --tls-key")
	}
	opts := []broker.Option{broker.WithAddr(*addr), broker.WithBrokers(*brokers),
		broker.WithDefaultPartitions(*partitions), broker.WithLogger(log)}
	if *topics != "" {
		var ts []string
		for _, t := range strings.Split(*topics, ",") {
			if t = strings.TrimSpace(t); t != "" {
				ts = append(ts, t)
			}
		}
		opts = append(opts, broker.WithTopics(*partitions, ts...))
	}
	if *maxMsg > 0 {
		opts = append(opts, broker.WithMaxMessageBytes(*maxMsg))
	}
	if *tlsCert != "" || *tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("loading --tls-cert/--tls-key: %w", err)
		}
		tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if *tlsCA != "" {
			pem, err := os.ReadFile(*tlsCA)
			if err != nil {
				return fmt.Errorf("reading --tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--tls-ca %s holds no PEM certificate", *tlsCA)
			}
			tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		opts = append(opts, broker.WithTLS(tc))
	}
	if *saslUser != "" {
		pass := *saslPass
		if pass == "" {
			pass = os.Getenv("CREDITFLOW_SASL_PASSWORD")
		}
		for _, m := range strings.Split(*saslMech, ",") {
			opts = append(opts, broker.WithSASL(strings.TrimSpace(m), *saslUser, pass))
		}
	}
	b, err := broker.Start(opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info().Strs("addrs", b.Addrs()).Bool("tls", *tlsCert != "").Bool("sasl", *saslUser != "").
		Msg("broker listening; stop with Ctrl-C")
	// One line on stdout for scripts: the bootstrap list.
	fmt.Println(strings.Join(b.Addrs(), ","))
	<-ctx.Done()
	log.Info().Msg("broker stopping")
	return nil
}
