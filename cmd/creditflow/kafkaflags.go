package main

import (
	"fmt"
	"os"

	"github.com/creditflow/creditflow/internal/kafkasec"
)

// kafkaFlags defines the Kafka connection flags shared by commands.
type kafkaFlags struct {
	brokers                     *string
	tlsCA, tlsCert, tlsKey      *string
	tlsInsecure                 *bool
	saslMech, saslUser, saslPwd *string
	saslPwdFile                 *string
}

// addKafkaFlags defines --brokers (Kafka group) and the TLS and SASL flags
// (Security group).
func addKafkaFlags(fs *flagSet) *kafkaFlags {
	k := &kafkaFlags{}
	fs.inGroup(groupKafka, func() {
		k.brokers = fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma-separated host:port")
	})
	fs.inGroup(groupSecurity, func() {
		k.tlsCA = fs.String("kafka-tls-ca", "", "PEM CA file: enables TLS to the brokers (Strimzi: ca.crt of the cluster CA secret); read again when it changes")
		k.tlsCert = fs.String("kafka-tls-cert", "", "PEM client certificate, mutual TLS (Strimzi: user.crt of the KafkaUser secret); read again when it changes")
		k.tlsKey = fs.String("kafka-tls-key", "", "PEM client key, mutual TLS (Strimzi: user.key); read again when it changes")
		k.tlsInsecure = fs.Bool("kafka-tls-insecure", false, "TLS without verifying the brokers' certificates (testing only)")
		k.saslMech = fs.String("sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		k.saslUser = fs.String("sasl-user", "", "SASL user name")
		k.saslPwd = fs.String("sasl-password", "", "SASL password (prefer --sasl-password-file or CREDITFLOW_SASL_PASSWORD)")
		k.saslPwdFile = fs.String("sasl-password-file", "", "file holding the SASL password (Strimzi: password of the KafkaUser secret); read again for every new connection")
	})
	return k
}

func (k *kafkaFlags) security() (kafkasec.Config, error) {
	var sec kafkasec.Config
	if *k.tlsCA != "" || *k.tlsCert != "" || *k.tlsInsecure {
		t, err := kafkasec.LoadTLS(*k.tlsCA, *k.tlsCert, *k.tlsKey, *k.tlsInsecure)
		if err != nil {
			return sec, err
		}
		sec.TLS = t
	}
	sec.SASLMechanism, sec.Username, sec.Password = *k.saslMech, *k.saslUser, *k.saslPwd
	if *k.saslPwdFile != "" {
		// Read at every new connection: a rotated password needs no restart.
		if _, err := os.ReadFile(*k.saslPwdFile); err != nil {
			return sec, fmt.Errorf("--sasl-password-file: %w", err)
		}
		sec.PasswordFile = *k.saslPwdFile
	}
	if _, err := sec.Mechanism(); err != nil {
		return sec, err
	}
	return sec, nil
}
