// Package config is kdelay's configuration: one struct read from KDELAY_*
// environment variables, validated as a whole, and turned into franz-go
// client options and a slog logger.
//
// Load parses and validates in one step and reports every problem at once,
// each naming the variable and its bad value, e.g.
//
//	config: KDELAY_MAX_DELAY="soon": not a duration
//	config: KDELAY_PARTITIONS_PER_LEVEL=0: must be at least 1
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/kdelay/kdelay/levels"
)

// Prefix starts every variable name.
const Prefix = "KDELAY_"

// Config is kdelay's whole configuration. Field docs name the variable and
// its default; an empty variable counts as unset and takes the default.
type Config struct {
	// Brokers are the seed brokers, KDELAY_BROKERS, a comma list; default
	// localhost:9092 when the variable is unset. Set but empty is an error,
	// not the default: an empty value is a deployment mistake.
	Brokers []string `env:"BROKERS" envDefault:"localhost:9092" envSeparator:","`
	// ClientID is sent to the brokers, KDELAY_CLIENT_ID; default kdelay.
	ClientID string `env:"CLIENT_ID" envDefault:"kdelay"`
	// Topic is the delay topic, KDELAY_TOPIC; default delay-topic.
	Topic string `env:"TOPIC" envDefault:"delay-topic"`
	// Group is the consumer group of the relays, KDELAY_GROUP; default kdelay.
	Group string `env:"GROUP" envDefault:"kdelay"`
	// Levels is the level list in RocketMQ's messageDelayLevel form,
	// KDELAY_LEVELS; default the 18 RocketMQ levels, levels.DefaultSpec.
	Levels string `env:"LEVELS" envDefault:"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"`
	// PartitionsPerLevel is k, KDELAY_PARTITIONS_PER_LEVEL; default 1. The
	// delay topic has levels x k partitions.
	PartitionsPerLevel int `env:"PARTITIONS_PER_LEVEL" envDefault:"1"`
	// DataDir holds the wheel files and the exactly-once transactional ID,
	// KDELAY_DATA_DIR; default kdelay-data (relative to the working
	// directory; the container image sets /data). One relay per directory:
	// the relay holds a lock on it while it runs.
	DataDir string `env:"DATA_DIR" envDefault:"kdelay-data"`
	// DLQTopic receives records that cannot be delivered, KDELAY_DLQ_TOPIC;
	// default <topic>.dlq.
	DLQTopic string `env:"DLQ_TOPIC"`
	// CancelTopic, KDELAY_CANCEL_TOPIC, is the compacted topic of cancels:
	// a record keyed by a kdelay-id cancels the delayed records with that
	// id; default <topic>.cancel.
	CancelTopic string `env:"CANCEL_TOPIC"`
	// CancelMargin, KDELAY_CANCEL_MARGIN: a cancel the broker acknowledged
	// at least this long before a record's due time is always honoured; a
	// later one is best effort. Records are not forwarded before the relay
	// has read the cancel topic up to offsets taken no earlier than their
	// due time minus this margin. Default 100ms.
	CancelMargin time.Duration `env:"CANCEL_MARGIN" envDefault:"100ms"`
	// CancelledTopic, KDELAY_CANCELLED_TOPIC: when set, every cancelled
	// record is written there (with kdelay-source and kdelay-cancelled-at)
	// for audit instead of being dropped. Default: none (off).
	CancelledTopic string `env:"CANCELLED_TOPIC"`
	// TargetAllow, KDELAY_TARGET_ALLOW, a comma list of topic glob patterns
	// (path.Match syntax: "orders.*"); when set, only matching targets are
	// delivered to. Default: every topic.
	TargetAllow []string `env:"TARGET_ALLOW" envSeparator:","`
	// TargetDeny, KDELAY_TARGET_DENY, a comma list of topic glob patterns
	// that are never delivered to; it wins over TargetAllow. Internal
	// topics (__*), the delay topic and the dead-letter topic are always
	// denied. Default: none beyond those.
	TargetDeny []string `env:"TARGET_DENY" envSeparator:","`
	// MaxDelay, KDELAY_MAX_DELAY; default 720h (30 days). Records due later
	// than this after their timestamp are dead-lettered.
	MaxDelay time.Duration `env:"MAX_DELAY" envDefault:"720h"`
	// HTTPAddr serves /metrics, /healthz and /readyz, KDELAY_HTTP_ADDR;
	// default :8080. "off" disables the server; anything else must be
	// [host]:port with a port in 0..65535.
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080"`
	// LogLevel, KDELAY_LOG_LEVEL: debug, info, warn or error; default info.
	LogLevel string `env:"LOG_LEVEL" envDefault:"info"`
	// LogFormat, KDELAY_LOG_FORMAT: text (tint, coloured only on a
	// terminal) or json; default text.
	LogFormat string `env:"LOG_FORMAT" envDefault:"text"`
	// ShutdownTimeout bounds the graceful shutdown, KDELAY_SHUTDOWN_TIMEOUT;
	// default 30s.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s"`

	// WheelHorizon, KDELAY_WHEEL_HORIZON, is the longest wait the local
	// wheel takes; longer waits cascade through the delay topic. Default:
	// the largest gap between consecutive levels (1h for the default levels).
	WheelHorizon time.Duration `env:"WHEEL_HORIZON"`
	// WheelSync, KDELAY_WHEEL_SYNC: batch (fsync before every offset
	// commit: at least once, at most every 100ms; exactly once, every
	// transaction), interval (at most once a second) or none; default batch. Commits never
	// pass a record the wheel holds, so a weaker policy risks duplicates after
	// a crash, never loss.
	WheelSync string `env:"WHEEL_SYNC" envDefault:"batch"`
	// FetchMaxWait, KDELAY_FETCH_MAX_WAIT, bounds how long a fetch waits for
	// data, and so how late a resumed partition is read; default 100ms.
	FetchMaxWait time.Duration `env:"FETCH_MAX_WAIT" envDefault:"100ms"`
	// InstanceID, KDELAY_INSTANCE_ID, turns on static group membership
	// (KIP-345): a stable ID per relay, such as the StatefulSet pod name. A
	// relay restarted with the same ID gets its partitions back at once,
	// without a rebalance, and a clean shutdown does not leave the group (its
	// partitions wait for it up to the session timeout). Default: none
	// (dynamic membership).
	InstanceID string `env:"INSTANCE_ID"`
	// SessionTimeout, KDELAY_SESSION_TIMEOUT: how long the group waits for a
	// relay that stopped heartbeating (killed, cut off) before its
	// partitions move to another relay, and so how late their records can
	// be after a crash; default 10s (Kafka's is 45s). The broker bounds it
	// with group.min/max.session.timeout.ms (6s..30m by default).
	SessionTimeout time.Duration `env:"SESSION_TIMEOUT" envDefault:"10s"`
	// TargetMissingTimeout, KDELAY_TARGET_MISSING_TIMEOUT: how long a
	// missing target topic is retried before the record is dead-lettered;
	// default 30s.
	TargetMissingTimeout time.Duration `env:"TARGET_MISSING_TIMEOUT" envDefault:"30s"`
	// Delivery, KDELAY_DELIVERY: at-least-once (default) or exactly-once.
	// In exactly-once mode each batch's forwards, cascades, dead letters
	// and offset commit are one Kafka transaction: consumers reading with
	// isolation.level=read_committed see each record once.
	Delivery string `env:"DELIVERY" envDefault:"at-least-once"`
	// TransactionalID, KDELAY_TRANSACTIONAL_ID: the exactly-once relay's
	// transactional ID. Default kdelay-<group>-<KDELAY_INSTANCE_ID>, else
	// the one the data directory keeps (kdelay-<group>-<host>-<random>,
	// made on first start): unique by construction, since one relay holds
	// a data directory at a time, and stable across restarts on the same
	// directory (a restart then aborts what the previous process left open
	// at once). Set by hand it must be unique among live relays: two with
	// one ID fence each other and the older one stops.
	TransactionalID string `env:"TRANSACTIONAL_ID"`
	// RetryTimeout, KDELAY_RETRY_TIMEOUT: how long a record whose produce
	// fails with an error kdelay does not classify is retried before it is
	// dead-lettered with the error as its reason; default 2m. Retriable
	// errors (broker down, leader moves) are retried without bound, and a
	// failing dead-letter topic is retried without bound: nothing is dropped.
	RetryTimeout time.Duration `env:"RETRY_TIMEOUT" envDefault:"2m"`
	// StallTimeout, KDELAY_STALL_TIMEOUT: when the relay has due work and
	// has delivered nothing for this long, /healthz answers 503 (so
	// Kubernetes restarts it) and kdelay_stalled{reason="no_progress"} is 1;
	// default 3m.
	StallTimeout time.Duration `env:"STALL_TIMEOUT" envDefault:"3m"`
	// AllowLevelChange, KDELAY_ALLOW_LEVEL_CHANGE: start even though the
	// delay topic's records were written under another level table (found
	// in the data directory or in the group's commit metadata) and some are
	// still pending. Those with a kdelay-level header are then due by the
	// new table, which can be earlier than their producer meant. Default
	// false: such a relay refuses to start and says why.
	AllowLevelChange bool `env:"ALLOW_LEVEL_CHANGE" envDefault:"false"`
	// MissingTopicGrace, KDELAY_MISSING_TOPIC_GRACE: how long kdelay run
	// waits for a missing delay or dead-letter topic to appear before it
	// exits; a topic created a moment ago can take that long to reach every
	// broker's metadata. Default 30s; 0 exits at once.
	MissingTopicGrace time.Duration `env:"MISSING_TOPIC_GRACE" envDefault:"30s"`

	// SASLMechanism, KDELAY_SASL_MECHANISM: PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512, OAUTHBEARER (OIDC client credentials) or AWS_MSK_IAM
	// (credentials from the standard AWS chain); default none.
	SASLMechanism string `env:"SASL_MECHANISM"`
	// SASLUsername, KDELAY_SASL_USERNAME; with OAUTHBEARER the OAuth
	// client id.
	SASLUsername string `env:"SASL_USERNAME"`
	// SASLPassword, KDELAY_SASL_PASSWORD; with OAUTHBEARER the client
	// secret.
	SASLPassword string `env:"SASL_PASSWORD"`
	// SASLPasswordFile, KDELAY_SASL_PASSWORD_FILE: a file holding the
	// password or client secret (a mounted secret); trailing newlines are
	// cut. Used when KDELAY_SASL_PASSWORD is empty.
	SASLPasswordFile string `env:"SASL_PASSWORD_FILE"`
	// SASLOAuthTokenURL, KDELAY_SASL_OAUTH_TOKEN_URL: the OIDC token
	// endpoint (http or https) kdelay asks for a token with the client
	// credentials grant; required with OAUTHBEARER. A token is reused until
	// 80% of its lifetime has passed, then fetched again.
	SASLOAuthTokenURL string `env:"SASL_OAUTH_TOKEN_URL"`
	// SASLOAuthScope, KDELAY_SASL_OAUTH_SCOPE: the scopes to ask for,
	// space-separated; default none (the issuer's default).
	SASLOAuthScope string `env:"SASL_OAUTH_SCOPE"`
	// SASLOAuthExtensions, KDELAY_SASL_OAUTH_EXTENSIONS: SASL extensions
	// sent with the token, a comma list of key=value (Confluent Cloud wants
	// logicalCluster=lkc-...,identityPoolId=pool-...); default none.
	SASLOAuthExtensions map[string]string `env:"SASL_OAUTH_EXTENSIONS" envSeparator:"," envKeyValSeparator:"="`
	// TLSEnabled, KDELAY_TLS_ENABLED; default false.
	TLSEnabled bool `env:"TLS_ENABLED" envDefault:"false"`
	// TLSCAFile, KDELAY_TLS_CA_FILE: PEM CA bundle; default the system pool.
	TLSCAFile string `env:"TLS_CA_FILE"`
	// TLSCertFile and TLSKeyFile, KDELAY_TLS_CERT_FILE and
	// KDELAY_TLS_KEY_FILE: a client certificate (mutual TLS); both or none.
	TLSCertFile string `env:"TLS_CERT_FILE"`
	TLSKeyFile  string `env:"TLS_KEY_FILE"`

	table *levels.Table
}

// Load reads the configuration from environ (the process environment when
// nil) and validates it. The error lists every problem.
func Load(environ map[string]string) (Config, error) {
	opts := env.Options{Prefix: Prefix}
	if environ != nil {
		opts.Environment = environ
	} else {
		environ = envMap(os.Environ())
	}
	c, err := env.ParseAsWithOptions[Config](opts)
	var problems []error
	if v, set := environ[Prefix+"BROKERS"]; set && strings.TrimSpace(v) == "" {
		// env falls back to envDefault for an empty variable; for the
		// brokers that would silently mean localhost.
		problems = append(problems, fmt.Errorf("config: %sBROKERS=%q: set but empty; name at least one broker, host:port", Prefix, v))
	}
	unparsed := map[string]bool{}
	if err != nil {
		for _, e := range describeParseErrors(err, environ) {
			problems = append(problems, e)
			if name, _, ok := strings.Cut(strings.TrimPrefix(e.Error(), "config: "), "="); ok {
				unparsed[name] = true
			}
		}
	}
	// A variable that did not parse is left at its zero value; its
	// validation error would only repeat the parse error.
	for _, e := range c.validate() {
		if name, _, ok := strings.Cut(strings.TrimPrefix(e.Error(), "config: "), "="); !ok || !unparsed[name] {
			problems = append(problems, e)
		}
	}
	return c, errors.Join(problems...)
}

// Default returns the configuration with every default.
func Default() Config {
	c, err := Load(map[string]string{})
	if err != nil {
		panic(err) // the defaults are valid; TestDefaults proves it
	}
	return c
}

func envMap(kvs []string) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// describeParseErrors rewrites env's errors, which name struct fields, into
// ones naming the variable and its value.
func describeParseErrors(err error, environ map[string]string) []error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return []error{fmt.Errorf("config: %w", err)}
	}
	var out []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			name := Prefix + fieldTag(pe.Name)
			what := "invalid value"
			switch pe.Type {
			case reflect.TypeFor[time.Duration]():
				what = "not a duration (examples: 500ms, 90s, 1h30m)"
			case reflect.TypeFor[int]():
				what = "not an integer"
			case reflect.TypeFor[bool]():
				what = "not a boolean (true or false)"
			}
			out = append(out, fmt.Errorf("config: %s=%q: %s", name, environ[name], what))
			continue
		}
		out = append(out, fmt.Errorf("config: %w", e))
	}
	return out
}

func fieldTag(field string) string {
	f, ok := reflect.TypeFor[Config]().FieldByName(field)
	if !ok {
		return field
	}
	tag, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return tag
}

// Validate checks every field and fills the derived ones (the default
// dead-letter topic, the wheel horizon, the level table). It returns every
// problem at once, joined; each names the variable and the bad value.
func (c *Config) Validate() error { return errors.Join(c.validate()...) }

func (c *Config) validate() []error {
	var errs []error
	bad := func(name string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s%s=%q: %s", Prefix, name, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}

	if len(c.Brokers) == 0 {
		bad("BROKERS", "", "at least one broker is required")
	}
	for _, b := range c.Brokers {
		if b = strings.TrimSpace(b); b == "" || strings.ContainsAny(b, " /") {
			bad("BROKERS", strings.Join(c.Brokers, ","), "%q is not host:port", b)
		}
	}
	if err := levels.ValidTopicName(c.Topic); err != nil {
		bad("TOPIC", c.Topic, "not a valid Kafka topic name")
	}
	if strings.TrimSpace(c.Group) == "" {
		bad("GROUP", c.Group, "must not be empty")
	}
	durs, err := levels.ParseSpec(c.Levels)
	if err != nil {
		bad("LEVELS", c.Levels, "%v", strings.TrimPrefix(err.Error(), "levels: "))
	}
	if c.PartitionsPerLevel < 1 {
		bad("PARTITIONS_PER_LEVEL", c.PartitionsPerLevel, "must be at least 1")
	}
	if err == nil && c.PartitionsPerLevel >= 1 {
		t, terr := levels.New(durs, c.PartitionsPerLevel)
		if terr != nil {
			bad("PARTITIONS_PER_LEVEL", c.PartitionsPerLevel, "%v", terr)
		}
		c.table = t
	}
	if strings.TrimSpace(c.DataDir) == "" {
		bad("DATA_DIR", c.DataDir, "must not be empty")
	}
	if c.DLQTopic == "" && c.Topic != "" {
		c.DLQTopic = c.Topic + ".dlq"
	}
	if err := levels.ValidTopicName(c.DLQTopic); err != nil {
		bad("DLQ_TOPIC", c.DLQTopic, "not a valid Kafka topic name")
	} else if c.DLQTopic == c.Topic {
		bad("DLQ_TOPIC", c.DLQTopic, "must differ from KDELAY_TOPIC")
	}
	if c.CancelTopic == "" && c.Topic != "" {
		c.CancelTopic = c.Topic + ".cancel"
	}
	if err := levels.ValidTopicName(c.CancelTopic); err != nil {
		bad("CANCEL_TOPIC", c.CancelTopic, "not a valid Kafka topic name")
	} else if c.CancelTopic == c.Topic || c.CancelTopic == c.DLQTopic {
		bad("CANCEL_TOPIC", c.CancelTopic, "must differ from KDELAY_TOPIC and KDELAY_DLQ_TOPIC")
	}
	if strings.EqualFold(c.CancelledTopic, "off") {
		c.CancelledTopic = ""
	}
	if c.CancelledTopic != "" {
		if err := levels.ValidTopicName(c.CancelledTopic); err != nil {
			bad("CANCELLED_TOPIC", c.CancelledTopic, "not a valid Kafka topic name")
		} else if c.CancelledTopic == c.Topic || c.CancelledTopic == c.DLQTopic || c.CancelledTopic == c.CancelTopic {
			bad("CANCELLED_TOPIC", c.CancelledTopic, "must differ from KDELAY_TOPIC, KDELAY_DLQ_TOPIC and KDELAY_CANCEL_TOPIC")
		}
	}
	if c.CancelMargin < 0 || c.CancelMargin > time.Minute {
		bad("CANCEL_MARGIN", c.CancelMargin, "must be in [0, 1m]")
	}
	for _, p := range c.TargetAllow {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			bad("TARGET_ALLOW", strings.Join(c.TargetAllow, ","), "bad pattern %q", p)
		}
	}
	for _, p := range c.TargetDeny {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			bad("TARGET_DENY", strings.Join(c.TargetDeny, ","), "bad pattern %q", p)
		}
	}
	if err := validHTTPAddr(c.HTTPAddr); err != nil {
		bad("HTTP_ADDR", c.HTTPAddr, "%v", err)
	}
	if c.MaxDelay <= 0 {
		bad("MAX_DELAY", c.MaxDelay, "must be positive")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(c.LogLevel)) {
		bad("LOG_LEVEL", c.LogLevel, "must be debug, info, warn or error")
	}
	if !slices.Contains([]string{"text", "json"}, strings.ToLower(c.LogFormat)) {
		bad("LOG_FORMAT", c.LogFormat, "must be text or json")
	}
	if c.ShutdownTimeout <= 0 {
		bad("SHUTDOWN_TIMEOUT", c.ShutdownTimeout, "must be positive")
	}
	if c.WheelHorizon < 0 {
		bad("WHEEL_HORIZON", c.WheelHorizon, "must not be negative")
	} else if c.WheelHorizon == 0 && c.table != nil {
		c.WheelHorizon = c.table.MaxGap()
	}
	if !slices.Contains([]string{"batch", "interval", "none"}, strings.ToLower(c.WheelSync)) {
		bad("WHEEL_SYNC", c.WheelSync, "must be batch, interval or none")
	}
	if c.FetchMaxWait <= 0 || c.FetchMaxWait > time.Minute {
		bad("FETCH_MAX_WAIT", c.FetchMaxWait, "must be in (0, 1m]")
	}
	if c.SessionTimeout < time.Second || c.SessionTimeout > 30*time.Minute {
		bad("SESSION_TIMEOUT", c.SessionTimeout, "must be in [1s, 30m]")
	}
	if c.TargetMissingTimeout < 0 {
		bad("TARGET_MISSING_TIMEOUT", c.TargetMissingTimeout, "must not be negative")
	}
	if c.Delivery != "at-least-once" && c.Delivery != "exactly-once" {
		bad("DELIVERY", c.Delivery, "must be at-least-once or exactly-once")
	}
	if c.RetryTimeout < 0 {
		bad("RETRY_TIMEOUT", c.RetryTimeout, "must not be negative")
	}
	if c.StallTimeout < 10*time.Second {
		bad("STALL_TIMEOUT", c.StallTimeout, "must be at least 10s")
	}
	if c.MissingTopicGrace < 0 {
		bad("MISSING_TOPIC_GRACE", c.MissingTopicGrace, "must not be negative")
	}
	return append(errs, c.validateSecurity()...)
}

// validHTTPAddr accepts "off" or [host]:port.
func validHTTPAddr(addr string) error {
	if strings.EqualFold(addr, "off") {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New(`want [host]:port (":8080", "127.0.0.1:9100") or "off"`)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	return nil
}

func (c *Config) validateSecurity() []error {
	var errs []error
	bad := func(name string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s%s=%q: %s", Prefix, name, fmt.Sprint(value), fmt.Sprintf(format, args...)))
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
		if c.SASLUsername != "" {
			bad("SASL_USERNAME", c.SASLUsername, "set, but KDELAY_SASL_MECHANISM is empty")
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER":
		if c.SASLUsername == "" {
			bad("SASL_USERNAME", "", "required with KDELAY_SASL_MECHANISM=%s", c.SASLMechanism)
		}
		if c.SASLPassword == "" && c.SASLPasswordFile == "" {
			bad("SASL_PASSWORD", "", "required with KDELAY_SASL_MECHANISM=%s (or KDELAY_SASL_PASSWORD_FILE)", c.SASLMechanism)
		}
	case "AWS_MSK_IAM":
		for _, f := range []struct{ name, value string }{
			{"SASL_USERNAME", c.SASLUsername}, {"SASL_PASSWORD", c.SASLPassword}, {"SASL_PASSWORD_FILE", c.SASLPasswordFile},
		} {
			if f.value != "" {
				bad(f.name, f.value, "not used with AWS_MSK_IAM: credentials come from the AWS chain (AWS_* variables, profile, web identity, container or instance role)")
			}
		}
		if !c.TLSEnabled {
			bad("TLS_ENABLED", c.TLSEnabled, "must be true with AWS_MSK_IAM: MSK's IAM listeners take TLS only")
		}
	default:
		bad("SASL_MECHANISM", c.SASLMechanism, "must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM")
	}
	errs = append(errs, c.validateOAuth()...)
	if c.SASLPassword == "" && c.SASLPasswordFile != "" {
		if _, err := os.Stat(c.SASLPasswordFile); err != nil {
			bad("SASL_PASSWORD_FILE", c.SASLPasswordFile, "cannot read: %v", errors.Unwrap(err))
		}
	}
	for _, f := range []struct{ name, value string }{
		{"TLS_CA_FILE", c.TLSCAFile}, {"TLS_CERT_FILE", c.TLSCertFile}, {"TLS_KEY_FILE", c.TLSKeyFile},
	} {
		if f.value == "" {
			continue
		}
		if !c.TLSEnabled {
			bad(f.name, f.value, "set, but KDELAY_TLS_ENABLED is false")
		} else if _, err := os.Stat(f.value); err != nil {
			bad(f.name, f.value, "cannot read: %v", errors.Unwrap(err))
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("TLS_KEY_FILE", c.TLSKeyFile, "KDELAY_TLS_CERT_FILE and KDELAY_TLS_KEY_FILE go together")
	}
	return errs
}

// Table returns the level table; valid after a successful [Load] or
// [Config.Validate].
func (c Config) Table() *levels.Table { return c.table }

// TargetAllowed reports whether a record may be delivered to topic, and if
// not, why. Internal topics (__*), the delay topic and the dead-letter
// topic are always refused; then the deny patterns; then, when allow
// patterns are set, a topic must match one.
func (c *Config) TargetAllowed(topic string) (bool, string) {
	switch {
	case strings.HasPrefix(topic, "__"):
		return false, "internal topic"
	case topic == c.Topic:
		return false, "the delay topic itself"
	case topic == c.DLQTopic:
		return false, "the dead-letter topic"
	case topic == c.CancelTopic:
		return false, "the cancel topic"
	case topic == c.CancelledTopic && topic != "":
		return false, "the cancelled-records topic"
	}
	for _, p := range c.TargetDeny {
		if ok, _ := path.Match(p, topic); ok {
			return false, "denied by KDELAY_TARGET_DENY pattern " + p
		}
	}
	if len(c.TargetAllow) == 0 {
		return true, ""
	}
	for _, p := range c.TargetAllow {
		if ok, _ := path.Match(p, topic); ok {
			return true, ""
		}
	}
	return false, "not allowed by KDELAY_TARGET_ALLOW"
}
