package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"
)

// KafkaOpts returns the franz-go options shared by every client kdelay
// builds: seed brokers, client ID, SASL, TLS, and kgo's own logs through
// log (kslog). It reads the password and certificate files. OAUTHBEARER
// and AWS_MSK_IAM fetch their tokens or credentials when a connection
// authenticates, not here.
func (c Config) KafkaOpts(log *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
	}
	if log != nil {
		opts = append(opts, kgo.WithLogger(kslog.New(log.With("component", "kgo"))))
	}
	if c.SASLMechanism != "" {
		pass := c.SASLPassword
		if pass == "" && c.SASLPasswordFile != "" {
			b, err := os.ReadFile(c.SASLPasswordFile)
			if err != nil {
				return nil, fmt.Errorf("config: KDELAY_SASL_PASSWORD_FILE=%q: %w", c.SASLPasswordFile, err)
			}
			pass = strings.TrimRight(string(b), "\r\n")
		}
		switch strings.ToUpper(c.SASLMechanism) {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUsername, Pass: pass}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUsername, Pass: pass}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUsername, Pass: pass}.AsSha512Mechanism()))
		case "OAUTHBEARER":
			opts = append(opts, kgo.SASL(c.oauthMechanism(pass, time.Now)))
		case "AWS_MSK_IAM":
			m, err := mskIAM(context.Background())
			if err != nil {
				return nil, err
			}
			opts = append(opts, kgo.SASL(m))
		default:
			return nil, fmt.Errorf("config: KDELAY_SASL_MECHANISM=%q: unsupported", c.SASLMechanism)
		}
	}
	if c.TLSEnabled {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}).DialContext))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("config: KDELAY_TLS_CA_FILE=%q: %w", c.TLSCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: KDELAY_TLS_CA_FILE=%q: no PEM certificate found", c.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: KDELAY_TLS_CERT_FILE=%q, KDELAY_TLS_KEY_FILE=%q: %w", c.TLSCertFile, c.TLSKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
